/* layer/template.h — included by every header of src/template/: the build fails when a room
 * that may not use the template room includes one (see ../layering.h). */
#ifndef INFERD_UTIL_LAYER_TEMPLATE_H
#define INFERD_UTIL_LAYER_TEMPLATE_H
#include "../layering.h"
IFD_LAYER(TEMPLATE);
#endif
