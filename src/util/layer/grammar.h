/* layer/grammar.h — included by every header of src/grammar/: the build fails when a room
 * that may not use the grammar room includes one (see ../layering.h). */
#ifndef INFERD_UTIL_LAYER_GRAMMAR_H
#define INFERD_UTIL_LAYER_GRAMMAR_H
#include "../layering.h"
IFD_LAYER(GRAMMAR);
#endif
