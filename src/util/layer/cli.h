/* layer/cli.h — included by every header of src/cli/: the build fails when a room
 * that may not use the cli room includes one (see ../layering.h). */
#ifndef INFERD_UTIL_LAYER_CLI_H
#define INFERD_UTIL_LAYER_CLI_H
#include "../layering.h"
IFD_LAYER(CLI);
#endif
