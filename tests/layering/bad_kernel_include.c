/* bad_kernel_include.c — an engine-room source that includes a CPU kernel header
 * (DESIGN.md: the engine never calls a kernel, only backend.h). layering_bad_kernel
 * builds it in the engine room and must fail with the layering message;
 * layering_good_kernel builds it in the backend room and must compile. */
#include "backend/cpu/ops.h"

int layering_probe_kernel(void) { return 0; }
