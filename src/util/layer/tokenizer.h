/* layer/tokenizer.h — included by every header of src/tokenizer/: the build fails when a room
 * that may not use the tokenizer room includes one (see ../layering.h). */
#ifndef INFERD_UTIL_LAYER_TOKENIZER_H
#define INFERD_UTIL_LAYER_TOKENIZER_H
#include "../layering.h"
IFD_LAYER(TOKENIZER);
#endif
