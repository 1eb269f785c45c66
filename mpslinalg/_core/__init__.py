"""The machinery every op family shares (nothing here knows a particular family):

- :mod:`.backend`: backend choice (``set_backend`` / ``use_backend``) and the torch fast path;
- :mod:`.checks`: argument validation with uniform messages, the dtype policy;
- :mod:`.errors`: :class:`~mpslinalg.LinAlgError`, ``check_errors``, torch errors reworded;
- :mod:`.op`: the op factory (registration, fake, autograd, upcast, ``out=``, public wrappers);
- :mod:`.metal`: loading, naming and launching the Metal sources;
- :mod:`.copy`: the strided gather kernel that makes any view contiguous for a kernel;
- :mod:`.platform`: what this machine can run (``python -m mpslinalg info``);
- :mod:`.registry`: the cases behind ``python -m mpslinalg check`` and ``bench``.
"""
