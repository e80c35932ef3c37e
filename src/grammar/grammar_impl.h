/* grammar_impl.h — the grammar room's internals shared by its files: the compiled
 * layout (grammar.c), the matcher (grammar_match.c) and the vocabulary trie
 * (grammar_vocab.c). Not for use outside src/grammar/. */
#ifndef INFERD_GRAMMAR_IMPL_H
#define INFERD_GRAMMAR_IMPL_H
#include "../util/layer/grammar.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "grammar.h"
#include "util/common.h"

#define GSYM_END INT32_MIN /* closes an alternative in gram.sym */

/* Growable array: *p has *cap elements of elem bytes; make room for need. */
bool gvec_grow(void **p, int64_t *cap, int64_t need, size_t elem);
#define GVEC_GROW(p, cap, need) gvec_grow((void **)&(p), &(cap), (need), sizeof *(p))

typedef struct gram_matcher gram_matcher;

struct gram {
    _Atomic int refs;
    int32_t n_rules, n_sets, root;
    int32_t *sym;      /* (n_sym) symbols of every alternative, each closed by GSYM_END */
    int32_t n_sym;
    int32_t *rule_alt; /* (n_rules + 1) rule r's alternatives: alt_pos[rule_alt[r] ..] */
    int32_t *alt_pos;  /* (n_alts) the first position of each alternative */
    uint8_t *nullable; /* (n_rules) */
    int n_classes;
    uint8_t byte_class[256]; /* byte -> class */
    uint8_t class_rep[256];  /* class -> its smallest byte */
    uint32_t (*set_cls)[8];  /* (n_sets) each terminal as a set of classes */
    uint32_t (*sets)[8];     /* (n_sets) each terminal as a set of bytes (the reference) */
    gram_matcher *m;         /* lazily built; one thread at a time */
};

/* Does terminal symbol s (< 0, != GSYM_END) accept class c? */
static inline bool gram_term_has(const gram *g, int32_t s, int c) {
    return g->set_cls[~s][c >> 5] >> (c & 31) & 1;
}

void gram_matcher_free(gram *g);

/* A trie of byte strings in DFS preorder: node i spells its parent's string + byte[i],
 * at depth[i] (1-based); its subtree ends before end[i]; the tokens whose string ends
 * exactly at node i are toks[tok_off[i] .. tok_off[i + 1]). The vocabulary's trie holds
 * the tokens' pieces; the matcher's rest tries hold tails of pieces. */
typedef struct rtrie {
    int32_t n_nodes;
    uint8_t *byte;
    uint16_t *depth;
    int32_t *end;
    int32_t *tok_off; /* (n_nodes + 1) */
    int32_t *toks;
} rtrie;

/* (token, offset): the tail of token's piece from byte off on. */
typedef struct upair {
    int32_t tok, off;
} upair;

struct gram_vocab;
/* The trie of the tails u[0..nu) (sorted here); false on no memory. */
bool gram_rtrie_build(rtrie *t, const struct gram_vocab *v, upair *u, int64_t nu);
void gram_rtrie_free(rtrie *t); /* the arrays; t itself is the caller's */
int64_t gram_rtrie_bytes(const rtrie *t);

struct gram_vocab {
    int32_t n_vocab, n_words;
    /* pieces: token id's bytes are bytes[off[id] .. off[id + 1]) */
    uint32_t *off;
    char *bytes;
    uint8_t *is_eog; /* (n_vocab) */
    int32_t *eog;    /* the EOG ids */
    int32_t n_eog;
    rtrie trie;      /* the non-empty, non-EOG pieces */
    int32_t max_depth; /* the longest piece */
};

#endif
