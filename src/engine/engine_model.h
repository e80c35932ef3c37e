/* engine_model.h — private to the source tree: the engine's model (weights,
 * hyper-parameters, tokenizer, chat template) for the in-tree code that needs more than
 * include/inferd.h offers (the server's chat templating and token pieces, the CLI,
 * tests). Not part of the public API; embedders use inferd.h alone. Thread-safe: the
 * model is read-only while the engine lives. */
#ifndef INFERD_ENGINE_MODEL_H
#define INFERD_ENGINE_MODEL_H
#include "../util/layer/engine_model.h"

#include "inferd.h"

struct model;
/* Owned by the engine; valid until inferd_engine_destroy. (Defined in engine.c.) */
const struct model *inferd_model(const inferd_engine *e);

#endif
