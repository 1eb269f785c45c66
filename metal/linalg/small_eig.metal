// The n <= 4 eig kernels (small_eig_*), generated: see small_eig.h.
#include "small_eig.h"
