/* test_stop.c — the stop-string matcher against a naive reference over the whole text:
 * every possible split of the text into chunks, eager emission (only what could still
 * start a stop string is held), flush at the end, overlapping candidates, ties, UTF-8
 * stop strings, include_stop, stop token ids, limits; plus a random differential test. */
#include <stdbool.h>
#include <stdint.h>

#include "engine/stop.h"
#include "test_util.h"
#include "util/common.h"

/* ---- reference ------------------------------------------------------------------ */

typedef struct ref_result {
    size_t out_len; /* bytes of the text emitted in total */
    int matched;    /* index, or -1 */
} ref_result;

/* The first position where any stop string ends; on a tie the longest string. */
static ref_result ref_final(const char *t, size_t n, const char *const *stops, int n_stops,
                            bool include) {
    for (size_t e = 1; e <= n; e++) {
        int best = -1;
        size_t best_len = 0;
        for (int i = 0; i < n_stops; i++) {
            size_t l = strlen(stops[i]);
            if (l == 0 || l > e || memcmp(t + e - l, stops[i], l) != 0) continue;
            if (best < 0 || l > best_len) best = i, best_len = l;
        }
        if (best >= 0) return (ref_result){include ? e : e - best_len, best};
    }
    return (ref_result){n, -1};
}

/* With no stop completed in t[0..n): bytes that must be out by now (n minus the longest
 * suffix that is a proper prefix of a stop string). */
static size_t ref_safe(const char *t, size_t n, const char *const *stops, int n_stops) {
    size_t hold = 0;
    for (int i = 0; i < n_stops; i++) {
        size_t l = strlen(stops[i]);
        for (size_t k = l > 0 ? l - 1 : 0; k > hold; k--)
            if (k <= n && memcmp(t + n - k, stops[i], k) == 0) {
                hold = k;
                break;
            }
    }
    return n - hold;
}

/* Whole UTF-8 characters only (structure check, enough for the test strings). */
static bool utf8_whole(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3
                               : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (k == 0 || i + k > n) return false;
        for (size_t j = 1; j < k; j++)
            if (((unsigned char)s[i + j] & 0xC0) != 0x80) return false;
        i += k;
    }
    return true;
}

/* Feed t split at the given cut points (ascending, inside (0, n)); check everything
 * against the reference. Returns false on the first mismatch (after reporting). */
static bool run_split(const char *t, size_t n, const char *const *stops, int n_stops,
                      bool include, const size_t *cuts, int n_cuts, bool check_utf8) {
    stop_matcher m;
    CHECK(stop_init(&m, stops, NULL, n_stops, include) == IFD_OK);
    const ref_result want = ref_final(t, n, stops, n_stops, include);
    char out[512], buf[512 + STOP_MAX_BYTES];
    size_t w = 0, pos = 0;
    bool stopped = false;
    for (int c = 0; c <= n_cuts; c++) {
        const size_t end = c < n_cuts ? cuts[c] : n;
        size_t k = stop_push(&m, t + pos, end - pos, buf, sizeof buf, &stopped);
        if (check_utf8 && !utf8_whole(buf, k)) {
            CHECKF(0, "chunk %d emitted a partial UTF-8 character", c);
            return false;
        }
        memcpy(out + w, buf, k);
        w += k;
        pos = end;
        /* never ahead of the final answer, never behind what is already safe */
        if (w > want.out_len || memcmp(out, t, w) != 0) {
            CHECKF(0, "'%.*s' after %zu bytes: emitted '%.*s', final is '%.*s'", (int)n, t, pos,
                   (int)w, out, (int)want.out_len, t);
            return false;
        }
        const ref_result so_far = ref_final(t, pos, stops, n_stops, include);
        if (so_far.matched < 0) {
            if (stopped || w != ref_safe(t, pos, stops, n_stops)) {
                CHECKF(0, "'%.*s' after %zu bytes: emitted %zu, safe %zu, stopped %d", (int)n, t,
                       pos, w, ref_safe(t, pos, stops, n_stops), stopped);
                return false;
            }
            CHECK(stop_held(&m) == pos - w);
        } else if (!stopped) {
            CHECKF(0, "'%.*s' after %zu bytes: stop not reported", (int)n, t, pos);
            return false;
        }
    }
    if (!stopped) w += stop_flush(&m, out + w, sizeof out - w);
    if (w != want.out_len || memcmp(out, t, w) != 0 || stop_matched(&m) != want.matched) {
        CHECKF(0, "'%.*s': got '%.*s' (stop %d), want '%.*s' (stop %d)", (int)n, t, (int)w, out,
               stop_matched(&m), (int)want.out_len, t, want.matched);
        return false;
    }
    /* after a stop nothing more comes out */
    if (stopped) {
        bool again = false;
        CHECK(stop_push(&m, "xyz", 3, buf, sizeof buf, &again) == 0 && again);
        CHECK(stop_flush(&m, buf, sizeof buf) == 0);
    }
    return true;
}

/* Every split of t at character boundaries (2^(boundaries) cases). */
static void all_splits(const char *t, const char *const *stops, int n_stops, bool include) {
    const size_t n = strlen(t);
    size_t bounds[24];
    int nb = 0;
    for (size_t i = 1; i < n; i++)
        if (((unsigned char)t[i] & 0xC0) != 0x80) bounds[nb++] = i;
    IFD_ASSERT(nb <= 16);
    for (uint32_t mask = 0; mask < (1u << nb); mask++) {
        size_t cuts[24];
        int nc = 0;
        for (int b = 0; b < nb; b++)
            if (mask & (1u << b)) cuts[nc++] = bounds[b];
        if (!run_split(t, n, stops, n_stops, include, cuts, nc, true)) {
            fprintf(stderr, "  (split mask 0x%x, include %d)\n", mask, include);
            return;
        }
    }
}

/* ---- tests ---------------------------------------------------------------------------- */

static void test_split_user_turn(void) {
    const char *stops[] = {"\n\nUser:"};
    /* the brief's case: "\n", "\nUs", "er:" */
    stop_matcher m;
    CHECK(stop_init(&m, stops, NULL, 1, false) == IFD_OK);
    char buf[64];
    bool st = false;
    CHECK(stop_push(&m, "Sure.", 5, buf, sizeof buf, &st) == 5 && !memcmp(buf, "Sure.", 5));
    CHECK(stop_push(&m, "\n", 1, buf, sizeof buf, &st) == 0 && !st && stop_held(&m) == 1);
    CHECK(stop_push(&m, "\nUs", 3, buf, sizeof buf, &st) == 0 && !st && stop_held(&m) == 4);
    CHECK(stop_push(&m, "er:", 3, buf, sizeof buf, &st) == 0 && st && stop_matched(&m) == 0);
    CHECK(stop_flush(&m, buf, sizeof buf) == 0);
    /* a near miss releases the held text */
    CHECK(stop_init(&m, stops, NULL, 1, false) == IFD_OK);
    CHECK(stop_push(&m, "a\n\nUse", 6, buf, sizeof buf, &st) == 1 && !st);
    CHECK(stop_push(&m, "d", 1, buf, sizeof buf, &st) == 6 && !memcmp(buf, "\n\nUsed", 6));
    all_splits("Hi\n\nUser: x", stops, 1, false);
    all_splits("Hi\n\nUser: x", stops, 1, true);
    all_splits("a\n\n\nUser:b", stops, 1, false);
    all_splits("\n\nUse\n\nUser", stops, 1, false);
}

static void test_no_stop_emits_everything(void) {
    const char *stops[] = {"STOP", "###"};
    all_splits("no stop here", stops, 2, false);
    all_splits("ST ## STO", stops, 2, false);            /* partials at the end: flushed */
    stop_matcher m;
    CHECK(stop_init(&m, NULL, NULL, 0, false) == IFD_OK);
    char buf[16];
    bool st = true;
    CHECK(stop_push(&m, "abc", 3, buf, sizeof buf, &st) == 3 && !st);
    CHECK(stop_flush(&m, buf, sizeof buf) == 0 && stop_matched(&m) == -1);
    /* flush returns exactly the held text */
    CHECK(stop_init(&m, stops, NULL, 2, false) == IFD_OK);
    CHECK(stop_push(&m, "xx##", 4, buf, sizeof buf, &st) == 2 && !st);
    CHECK(stop_flush(&m, buf, sizeof buf) == 2 && !memcmp(buf, "##", 2));
    CHECK(stop_held(&m) == 0);
}

static void test_overlapping(void) {
    const char *stops[] = {"abab", "abac"};
    all_splits("xabababacy", stops, 2, false);
    all_splits("abaabac", stops, 2, false);
    all_splits("aabacab", stops, 2, false);
    all_splits("abaabaab", stops, 2, false);
    all_splits("abaabac", stops, 2, true);
    const char *s2[] = {"aaa", "aab"};
    all_splits("aaaab", s2, 2, false);
    all_splits("aaab", s2, 2, false);
    /* same end: the longer one (it starts first) */
    const char *ties[] = {"b", "ab"};
    all_splits("xxabyy", ties, 2, false);
    stop_matcher m;
    CHECK(stop_init(&m, ties, NULL, 2, false) == IFD_OK);
    char buf[64];
    bool st;
    CHECK(stop_push(&m, "xab", 3, buf, sizeof buf, &st) == 1 && st && stop_matched(&m) == 1);
    /* earlier end wins over an earlier start that has not completed yet */
    const char *nest[] = {"abcd", "c"};
    CHECK(stop_init(&m, nest, NULL, 2, false) == IFD_OK);
    CHECK(stop_push(&m, "abcd", 4, buf, sizeof buf, &st) == 2 && st && stop_matched(&m) == 1);
    all_splits("zabcd", nest, 2, false);
}

static void test_include_stop_and_ids(void) {
    const char *stops[] = {"END"};
    stop_matcher m;
    CHECK(stop_init(&m, stops, NULL, 1, true) == IFD_OK);
    char buf[64];
    bool st;
    size_t k = stop_push(&m, "the E", 5, buf, sizeof buf, &st);
    CHECK(k == 4 && !st);
    k = stop_push(&m, "ND and more", 11, buf, sizeof buf, &st);
    CHECK(k == 3 && !memcmp(buf, "END", 3) && st);
    all_splits("xENENDy", stops, 1, true);
    /* stop token ids */
    const int32_t ids[] = {2, 151645};
    CHECK(stop_set_ids(&m, ids, 2) == IFD_OK);
    CHECK(stop_is_stop_id(&m, 151645) && stop_is_stop_id(&m, 2) && !stop_is_stop_id(&m, 3));
    CHECK(stop_set_ids(&m, ids, STOP_MAX_IDS + 1) == IFD_ERR_LIMIT);
    CHECK(stop_set_ids(&m, NULL, 0) == IFD_OK && !stop_is_stop_id(&m, 2));
    /* reset clears the state but keeps the strings */
    CHECK(stop_init(&m, stops, NULL, 1, false) == IFD_OK);
    stop_push(&m, "xEND", 4, buf, sizeof buf, &st);
    CHECK(st);
    stop_reset(&m);
    CHECK(stop_push(&m, "EN", 2, buf, sizeof buf, &st) == 0 && !st && stop_matched(&m) == -1);
}

static void test_utf8_stops(void) {
    const char *stops[] = {"。", "終わり", "é"};
    all_splits("こんにちは。さよ", stops, 3, false);
    all_splits("終わ終わりx", stops, 3, false);
    all_splits("caè é", stops, 3, false); /* è shares é's first byte */
    all_splits("ab終わ", stops, 3, false);  /* flushed whole */
    const char *emoji[] = {"🙂🙂"};
    all_splits("a🙂b🙂🙂c", emoji, 1, false);
    all_splits("a🙂b🙂🙂c", emoji, 1, true);
    /* a stop string may not start inside a character */
    const char *bad[] = {"\xA9x"};
    stop_matcher m;
    CHECK(stop_init(&m, bad, NULL, 1, false) == IFD_ERR_INVALID);
}

static void test_init_limits(void) {
    stop_matcher m;
    const char *many[STOP_MAX_STRINGS + 1];
    for (int i = 0; i <= STOP_MAX_STRINGS; i++) many[i] = "x";
    CHECK(stop_init(&m, many, NULL, STOP_MAX_STRINGS, false) == IFD_OK);
    CHECK(stop_init(&m, many, NULL, STOP_MAX_STRINGS + 1, false) == IFD_ERR_LIMIT);
    static char big[STOP_MAX_BYTES + 2];
    memset(big, 'q', sizeof big - 1);
    const char *one[] = {big};
    CHECK(stop_init(&m, one, NULL, 1, false) == IFD_ERR_LIMIT);
    const size_t len_ok = STOP_MAX_BYTES;
    CHECK(stop_init(&m, one, &len_ok, 1, false) == IFD_OK);
    /* a stop string as long as the pool: held text up to STOP_MAX_BYTES - 1 */
    static char text[STOP_MAX_BYTES + 8], out[2 * STOP_MAX_BYTES + 16];
    memset(text, 'q', STOP_MAX_BYTES - 1);
    bool st;
    CHECK(stop_push(&m, text, STOP_MAX_BYTES - 1, out, sizeof out, &st) == 0 && !st);
    CHECK(stop_held(&m) == STOP_MAX_BYTES - 1);
    CHECK(stop_push(&m, "q", 1, out, sizeof out, &st) == 0 && st);
    /* explicit lengths (bytes, may contain NUL); empty strings are skipped but keep
     * their index */
    const char *with_empty[] = {"", "a\0b"};
    const size_t lens[] = {0, 3};
    CHECK(stop_init(&m, with_empty, lens, 2, false) == IFD_OK && m.n == 1);
    size_t k = stop_push(&m, "xa\0bz", 5, out, sizeof out, &st);
    CHECK(k == 1 && st && stop_matched(&m) == 1);
}

/* Random texts and stop sets over a 3-letter alphabet (many overlaps), random chunking,
 * against the reference. */
static void test_random_differential(void) {
    unsigned s = 12345;
#define RND(n) ((s = s * 1103515245u + 12345u), (int)((s >> 16) % (unsigned)(n)))
    for (int iter = 0; iter < 20000; iter++) {
        char t[41], sbuf[4][6];
        const char *stops[4];
        int n_stops = 1 + RND(4);
        for (int i = 0; i < n_stops; i++) {
            int l = 1 + RND(5);
            for (int j = 0; j < l; j++) sbuf[i][j] = (char)('a' + RND(3));
            sbuf[i][l] = 0;
            stops[i] = sbuf[i];
        }
        size_t n = (size_t)RND(41);
        for (size_t j = 0; j < n; j++) t[j] = (char)('a' + RND(3 + (iter & 1)));
        size_t cuts[40];
        int nc = 0;
        for (size_t j = 1; j < n; j++)
            if (RND(3) == 0) cuts[nc++] = j;
        if (!run_split(t, n, stops, n_stops, iter % 3 == 0, cuts, nc, false)) {
            fprintf(stderr, "  (iteration %d)\n", iter);
            return;
        }
    }
#undef RND
}

TEST_MAIN(T(test_split_user_turn), T(test_no_stop_emits_everything), T(test_overlapping),
          T(test_include_stop_and_ids), T(test_utf8_stops), T(test_init_limits),
          T(test_random_differential))
