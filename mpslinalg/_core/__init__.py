"""The machinery every op family shares (nothing here knows a particular family):

- `.backend`: backend choice (``set_backend`` / ``use_backend``) and the torch fast path;
- `.checks`: argument validation with uniform messages, the dtype policy;
- `.errors`: `mpslinalg.LinAlgError`, ``check_errors``, torch errors reworded;
- `.op`: the op factory (registration, fake, autograd, upcast, ``out=``, public wrappers);
- `.metal`: loading, naming and launching the Metal sources;
- `.copy`: the strided gather kernel that makes any view contiguous for a kernel;
- `.platform`: what this machine can run (``python -m mpslinalg info``);
- `.registry`: the cases behind ``python -m mpslinalg check`` and ``bench``.
"""
