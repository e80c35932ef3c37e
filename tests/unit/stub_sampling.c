/* stub_sampling.c — openai.c's one reference into the engine, for test binaries built
 * from the server's chat sources alone (chat_escape_asan.cmake). */
#include <string.h>

#include "inferd.h"

void inferd_sampling_default(inferd_sampling *s) {
    memset(s, 0, sizeof *s);
}
