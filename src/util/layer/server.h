/* layer/server.h — included by every header of src/server/: the build fails when a room
 * that may not use the server room includes one (see ../layering.h). */
#ifndef INFERD_UTIL_LAYER_SERVER_H
#define INFERD_UTIL_LAYER_SERVER_H
#include "../layering.h"
IFD_LAYER(SERVER);
#endif
