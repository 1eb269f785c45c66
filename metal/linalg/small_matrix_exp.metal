// The n <= 4 matrix_exp kernels (small_matrix_exp_<dtype>_n<n>), generated: see
// small_matrix_exp.h.
#include "small_matrix_exp.h"
