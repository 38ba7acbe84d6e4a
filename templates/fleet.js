(function () {
  "use strict";
  // Sorts the fleet table by a clicked heading: numbers by value, text by text, blanks last.
  var table = document.getElementById("tk-fleet");
  if (!table) { return; }
  var heads = table.querySelectorAll("thead th");
  function key(row, i) { return row.cells[i].getAttribute("data-v") || ""; }
  function sortBy(i, numeric, th) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
    rows.sort(function (a, b) {
      var x = key(a, i), y = key(b, i);
      if (x === "" || y === "") { return (x === "") - (y === ""); }
      if (numeric) { return dir * (parseFloat(x) - parseFloat(y)); }
      return dir * x.localeCompare(y);
    });
    for (var k = 0; k < heads.length; k++) { heads[k].removeAttribute("aria-sort"); }
    th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
    rows.forEach(function (r) { body.appendChild(r); });
  }
  Array.prototype.forEach.call(heads, function (th, i) {
    var button = th.querySelector("button");
    if (button) {
      button.addEventListener("click", function () { sortBy(i, th.getAttribute("data-numeric") === "1", th); });
    }
  });
  table.setAttribute("data-sortable", "1");
})();
