/* cli_util.h — helpers shared by the subcommands: strict number parsing (every
 * command runs the model through the engine API). CLI thread only. */
#ifndef INFERD_CLI_UTIL_H
#define INFERD_CLI_UTIL_H
#include "../util/layer/cli.h"

#include <stdbool.h>
#include <stdint.h>

bool cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
bool cli_parse_f32(const char *s, float lo, float hi, float *out);
bool cli_parse_u64(const char *s, uint64_t *out);
/* Parse "1 2 3" / "1,2,3" into a malloc'ed id list. */
bool cli_parse_ids(const char *s, int32_t **ids, int32_t *n);

#endif
