// The n <= 4 LU-family kernels (small_<op>_<dtype>_n<n>), generated: see small_inverse.h.
#include "small_inverse.h"
