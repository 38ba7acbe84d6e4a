(function () {
  "use strict";
  var body = document.body;
  var data = document.getElementById("tk-charts");
  var items = data ? JSON.parse(data.textContent) : [];
  function fail(message) {
    body.setAttribute("data-charts-error", message);
    var charts = document.querySelectorAll(".tk-chart");
    for (var i = 0; i < charts.length; i++) {
      charts[i].textContent = "This chart could not be drawn (" + message + "); the tables below hold the same figures.";
      charts[i].className += " tk-chart-failed";
    }
  }
  if (!items.length) { body.setAttribute("data-charts-rendered", "0"); return; }
  if (!window.Bokeh || !window.Bokeh.embed) { fail("the inline Bokeh library did not load"); return; }
  Promise.all(items.map(function (item) { return window.Bokeh.embed.embed_item(item); })).then(
    function () { body.setAttribute("data-charts-rendered", String(items.length)); },
    function (err) { fail(String((err && err.message) || err)); }
  );
})();
