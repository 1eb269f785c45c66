"""The machinery every op family shares (nothing here knows a particular family):

- `.declare`: an op is one declaration (inputs with core ranks, results with shape rules, the
  dtype policy, forwards, derivative rule) and the public functions generated from it;
- `.op`: the registration layer under it (schema, fake, autograd, fresh outputs, ``out=`` and
  its casting rules, the generated torch fast path);
- `.backend`: backend choice (``set_backend`` / ``use_backend``), read once per call;
- `.checks`: argument validation with uniform messages, the dtype tables;
- `.errors`: `mpslinalg.LinAlgError`, ``check_errors``, ``read_device``, torch errors reworded;
- `.metal`: loading, naming and launching the Metal sources (the one launch path, stream
  hooks, the dtype / SIMD width / grid tables);
- `.metal_params`: the kernels' parameter structs, read from their header declarations and
  packed by field name;
- `.copy`, `.elementwise`: the strided gather kernel and the grid-stride elementwise kernels;
- `.platform`: what this machine can run (``python -m mpslinalg info``);
- `.registry`, `.timing`: the cases behind ``python -m mpslinalg check`` and ``bench``, and how
  they are timed;
- `.seed`: reproducible seeds for the random ops;
- `.torch_bugs`: workarounds for measured bugs of torch (MKL's batched getrf).
"""
