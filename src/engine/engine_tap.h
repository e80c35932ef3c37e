/* engine_tap.h — a private hook on the engine for tools (`inferd logits`) and tests:
 * the full logits rows of the prompt of requests that ask for prompt logprobs.
 * Not part of the public API (inferd.h); the server never sets it.
 *
 * Thread: the tap runs on the engine thread, in postprocess, once per prompt position
 * whose row a step computed (positions 0 .. n_prompt-1; row p scores token p+1, the
 * last one the first generated token), before sampling. Set it before the first
 * submit; with a threaded engine it must not block. */
#ifndef INFERD_ENGINE_TAP_H
#define INFERD_ENGINE_TAP_H
#include "../util/layer/engine.h"

#include <stdbool.h>
#include <stdint.h>

#include "inferd.h"

/* row: [n_vocab] raw logits, valid during the call only */
typedef void (*engine_logits_tap)(void *user, uint64_t request_id, int32_t pos, const float *row,
                                  int32_t n_vocab);
void engine_set_logits_tap(inferd_engine *e, engine_logits_tap fn, void *user);

/* Tests only: verification accepts every draft token (a deliberately wrong rule, so a
 * distribution test can show that it would catch one). Set before the first submit. */
void engine_spec_debug_accept_all(inferd_engine *e, bool on);

/* Tests only: the adaptive choice's cost tables (ms of a target forward of n[i] tokens,
 * of a draft forward of dn[i]; n ascending, at most 24 each) instead of the start-up
 * measurement, and no correction from measured step times, so that the choices depend
 * on the acceptance and the load alone. Set before the first submit. */
void engine_spec_debug_costs(inferd_engine *e, const double *n, const double *ms, int32_t cnt, const double *dn,
                             const double *dms, int32_t dcnt);

/* Tests only: a target forward of n_tokens (each with its logits row) took ms, as if
 * seen while serving (the debug tables above do not learn from real steps). */
void engine_spec_debug_observe(inferd_engine *e, int32_t n_tokens, double ms);

#endif
