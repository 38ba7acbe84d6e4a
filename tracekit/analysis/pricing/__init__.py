"""Stage 2, pricing: what each unit of work costs and what bounds it.

Takes the segmented work table; gives each unit (``attribution.attribute``, the stage's entry) a
category (``taxonomy``), FLOPs and bytes from recorded shapes (``op_costs``), from the model's
architecture (``model_costs``), from a capture trace (``capture``) or from launch grids
(``grid_shapes``), the dtype whose peak it runs at (``dtypes``), and a bound on the device's
roofline (``roofline``; model-priced work above the roof: ``above_roof``), whose ceilings are
checked against the run's own kernels (``ceilings``).
``op_costs`` dispatches to the per-op models of ``matrix_ops``, ``vector_ops`` and ``engine_ops``
over ``op_args``; ``model_costs`` prices by what ``kernel_names`` reads from kernel names, with
``gemm_layers`` (GEMMs matched to layers by grid) and ``model_fit`` (does the trace fit the model).
``stated_weights`` reads the weight precision the GEMM kernels state.
"""
