/* stop.h — stop strings and stop token ids for one sequence.
 *
 * An incremental matcher over the generated text, fed chunk by chunk as the UTF-8-safe
 * detokenizer produces it. Text that could still be the start of a stop string is held
 * back (never emitted) until the next bytes decide it; when a stop string completes,
 * the text before it is emitted and the stop string and everything after it are
 * dropped (or, with include_stop, the text through the end of the stop string is
 * emitted); when generation ends for another reason (length, EOS, stop id) the held
 * text is flushed.
 *
 * Matching: one KMP automaton per stop string, so a byte costs O(number of strings).
 * The held text is always the longest suffix of the output that is a proper prefix of
 * some stop string, so it is never stored: it is that stop string's prefix. When
 * several stop strings complete on the same byte, the longest one wins (it starts
 * first); otherwise the first one to complete wins, as a streaming client would see.
 *
 * UTF-8: stop strings must not start with a continuation byte (stop_init rejects
 * them). Then a held region always starts at a character boundary of a valid UTF-8
 * text, so if every pushed chunk is whole characters, every emitted chunk is too.
 *
 * Stop token ids: a small set; stop_is_stop_id per sampled token. When it hits, the
 * caller finishes with reason "stop": with include_stop it pushes that token's text
 * first; then it calls stop_flush.
 *
 * Caller-allocated, no allocation (stop strings are copied in). Not thread-safe. */
#ifndef INFERD_STOP_H
#define INFERD_STOP_H
#include "../util/layer/engine.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STOP_MAX_STRINGS 16   /* = INFERD_MAX_STOP */
#define STOP_MAX_BYTES 2048   /* all stop strings together */
#define STOP_MAX_IDS 64

typedef struct stop_matcher {
    int32_t n;                        /* stop strings kept (empty ones are skipped) */
    int32_t n_ids;
    bool include_stop;
    bool stopped;                     /* a stop string completed; later pushes emit nothing */
    int32_t matched;                  /* index in the caller's list, or -1 */
    int32_t held;                     /* bytes held back (= state[witness]) */
    int32_t witness;                  /* a string whose prefix is the held text */
    int16_t orig[STOP_MAX_STRINGS];   /* index in the caller's list */
    uint16_t off[STOP_MAX_STRINGS];   /* into pool / fail */
    uint16_t len[STOP_MAX_STRINGS];
    uint16_t state[STOP_MAX_STRINGS]; /* bytes of string i matched by the text's end */
    uint16_t fail[STOP_MAX_BYTES];    /* KMP: fail[off + j] = border of string[0 .. j] */
    char pool[STOP_MAX_BYTES];
    int32_t ids[STOP_MAX_IDS];
} stop_matcher;

/* Copy n stop strings (lens may be NULL: NUL-terminated). Empty strings are skipped.
 * IFD_ERR_LIMIT: more than STOP_MAX_STRINGS or STOP_MAX_BYTES in all;
 * IFD_ERR_INVALID: a string starting with a UTF-8 continuation byte (0x80-0xBF).
 * On error the matcher is left with no stop strings. */
int stop_init(stop_matcher *m, const char *const *stops, const size_t *lens, int n,
              bool include_stop);
/* Stop token ids (copied). IFD_ERR_LIMIT past STOP_MAX_IDS. */
int stop_set_ids(stop_matcher *m, const int32_t *ids, int n);
/* Back to the state after init: nothing held, not stopped. */
void stop_reset(stop_matcher *m);

bool stop_is_stop_id(const stop_matcher *m, int32_t id);

/* Feed n bytes of new text; write what can be emitted now to out and return its
 * length. out needs cap >= n + stop_held(m) bytes (n + STOP_MAX_BYTES always does).
 * *stopped (may be NULL) is set when a stop string has completed, now or earlier:
 * then stop_matched() says which and the matcher emits nothing more. */
size_t stop_push(stop_matcher *m, const char *text, size_t n, char *out, size_t cap,
                 bool *stopped);
/* Generation ended without a stop string: emit the held text (cap >= stop_held(m)). */
size_t stop_flush(stop_matcher *m, char *out, size_t cap);

static inline size_t stop_held(const stop_matcher *m) { return (size_t)m->held; }
/* Index (in the list given to stop_init) of the stop string that matched, or -1. */
static inline int stop_matched(const stop_matcher *m) { return m->matched; }

#endif
