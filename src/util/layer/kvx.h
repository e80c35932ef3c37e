/* layer/kvx.h — included by every header of src/kvx/: the build fails when a room that
 * may not use the KV-transfer room includes one (see ../layering.h). */
#ifndef INFERD_UTIL_LAYER_KVX_H
#define INFERD_UTIL_LAYER_KVX_H
#include "../layering.h"
IFD_LAYER(KVX);
#endif
