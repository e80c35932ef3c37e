/* layering.h — the rooms of DESIGN.md ("Layout") and who may use whom, checked at
 * compile time.
 *
 * Every room's library is compiled with IFD_ROOM_<ROOM> defined (CMakeLists.txt), and
 * every header of a room includes util/layer/<room>.h, which states
 * IFD_LAYER(<ROOM>): the build fails when a room includes a header of a room its arrows
 * do not allow. The backend's kernels (backend/cpu/, backend/cuda/) are a room of their
 * own here, KERNELS (util/layer/kernels.h), open to the backend and the cli only; the
 * engine's accessor of its model (engine/engine_model.h) is ENGINE_MODEL, open to the
 * engine, the server and the cli. The link rules (target_link_libraries per room) catch the other half:
 * a call into a room that is not linked. Code built outside a room (tests, fuzz
 * targets, tools) may include anything.
 *
 *   util       <- everyone
 *   model      util
 *   tokenizer  model, util            (the vocabulary is read from the GGUF file)
 *   template   util                   (+ cJSON, the JSON values a template sees)
 *   grammar    util                   (constrained decoding: grammars, their front ends,
 *                                      vocabulary masks; a pure library like template)
 *   backend    model, util   (its kernels, backend/cpu/ and backend/cuda/: the backend only)
 *   engine     backend, model, tokenizer, template, grammar, util   (backend.h, never a kernel,
 *              never the server; the template room for inferd.h's chat-template call)
 *   kvx        util                   (KV transfer between instances: transports that move
 *                                      block lists; the engine's pool is reached through
 *                                      callbacks the server gives, never directly)
 *   server     tokenizer, template, grammar, kvx, model, util  (+ the engine through include/inferd.h,
 *              and its one door engine/engine_model.h: the engine's model, read-only)
 *   cli        everything (src/main.c too)
 *
 * Not a header of any room; include only through util/layer/<room>.h. */
#ifndef INFERD_UTIL_LAYERING_H
#define INFERD_UTIL_LAYERING_H

#if defined(IFD_ROOM_UTIL)
#define IFD_MAY_USE_MODEL 0
#define IFD_MAY_USE_TOKENIZER 0
#define IFD_MAY_USE_TEMPLATE 0
#define IFD_MAY_USE_GRAMMAR 0
#define IFD_MAY_USE_BACKEND 0
#define IFD_MAY_USE_ENGINE 0
#define IFD_MAY_USE_KVX 0
#define IFD_MAY_USE_SERVER 0
#define IFD_MAY_USE_CLI 0
#define IFD_MAY_USE_KERNELS 0
#define IFD_MAY_USE_ENGINE_MODEL 0
#elif defined(IFD_ROOM_MODEL)
#define IFD_MAY_USE_MODEL 1
#define IFD_MAY_USE_TOKENIZER 0
#define IFD_MAY_USE_TEMPLATE 0
#define IFD_MAY_USE_GRAMMAR 0
#define IFD_MAY_USE_BACKEND 0
#define IFD_MAY_USE_ENGINE 0
#define IFD_MAY_USE_KVX 0
#define IFD_MAY_USE_SERVER 0
#define IFD_MAY_USE_CLI 0
#define IFD_MAY_USE_KERNELS 0
#define IFD_MAY_USE_ENGINE_MODEL 0
#elif defined(IFD_ROOM_TOKENIZER)
#define IFD_MAY_USE_MODEL 1
#define IFD_MAY_USE_TOKENIZER 1
#define IFD_MAY_USE_TEMPLATE 0
#define IFD_MAY_USE_GRAMMAR 0
#define IFD_MAY_USE_BACKEND 0
#define IFD_MAY_USE_ENGINE 0
#define IFD_MAY_USE_KVX 0
#define IFD_MAY_USE_SERVER 0
#define IFD_MAY_USE_CLI 0
#define IFD_MAY_USE_KERNELS 0
#define IFD_MAY_USE_ENGINE_MODEL 0
#elif defined(IFD_ROOM_TEMPLATE)
#define IFD_MAY_USE_MODEL 0
#define IFD_MAY_USE_TOKENIZER 0
#define IFD_MAY_USE_TEMPLATE 1
#define IFD_MAY_USE_GRAMMAR 0
#define IFD_MAY_USE_BACKEND 0
#define IFD_MAY_USE_ENGINE 0
#define IFD_MAY_USE_KVX 0
#define IFD_MAY_USE_SERVER 0
#define IFD_MAY_USE_CLI 0
#define IFD_MAY_USE_KERNELS 0
#define IFD_MAY_USE_ENGINE_MODEL 0
#elif defined(IFD_ROOM_GRAMMAR)
#define IFD_MAY_USE_MODEL 0
#define IFD_MAY_USE_TOKENIZER 0
#define IFD_MAY_USE_TEMPLATE 0
#define IFD_MAY_USE_GRAMMAR 1
#define IFD_MAY_USE_BACKEND 0
#define IFD_MAY_USE_ENGINE 0
#define IFD_MAY_USE_KVX 0
#define IFD_MAY_USE_SERVER 0
#define IFD_MAY_USE_CLI 0
#define IFD_MAY_USE_KERNELS 0
#define IFD_MAY_USE_ENGINE_MODEL 0
#elif defined(IFD_ROOM_BACKEND)
#define IFD_MAY_USE_MODEL 1
#define IFD_MAY_USE_TOKENIZER 0
#define IFD_MAY_USE_TEMPLATE 0
#define IFD_MAY_USE_GRAMMAR 0
#define IFD_MAY_USE_BACKEND 1
#define IFD_MAY_USE_ENGINE 0
#define IFD_MAY_USE_KVX 0
#define IFD_MAY_USE_SERVER 0
#define IFD_MAY_USE_CLI 0
#define IFD_MAY_USE_KERNELS 1
#define IFD_MAY_USE_ENGINE_MODEL 0
#elif defined(IFD_ROOM_ENGINE)
#define IFD_MAY_USE_MODEL 1
#define IFD_MAY_USE_TOKENIZER 1
#define IFD_MAY_USE_TEMPLATE 1
#define IFD_MAY_USE_GRAMMAR 1
#define IFD_MAY_USE_BACKEND 1
#define IFD_MAY_USE_ENGINE 1
#define IFD_MAY_USE_KVX 0
#define IFD_MAY_USE_SERVER 0
#define IFD_MAY_USE_CLI 0
#define IFD_MAY_USE_KERNELS 0
#define IFD_MAY_USE_ENGINE_MODEL 1
#elif defined(IFD_ROOM_KVX)
#define IFD_MAY_USE_MODEL 0
#define IFD_MAY_USE_TOKENIZER 0
#define IFD_MAY_USE_TEMPLATE 0
#define IFD_MAY_USE_GRAMMAR 0
#define IFD_MAY_USE_BACKEND 0
#define IFD_MAY_USE_ENGINE 0
#define IFD_MAY_USE_KVX 1
#define IFD_MAY_USE_SERVER 0
#define IFD_MAY_USE_CLI 0
#define IFD_MAY_USE_KERNELS 0
#define IFD_MAY_USE_ENGINE_MODEL 0
#elif defined(IFD_ROOM_SERVER)
#define IFD_MAY_USE_MODEL 1
#define IFD_MAY_USE_TOKENIZER 1
#define IFD_MAY_USE_TEMPLATE 1
#define IFD_MAY_USE_GRAMMAR 1
#define IFD_MAY_USE_BACKEND 0
#define IFD_MAY_USE_ENGINE 0 /* the engine's own headers; include/inferd.h is open to all */
#define IFD_MAY_USE_KVX 1
#define IFD_MAY_USE_SERVER 1
#define IFD_MAY_USE_CLI 0
#define IFD_MAY_USE_KERNELS 0
#define IFD_MAY_USE_ENGINE_MODEL 1
#else /* cli, main.c, and code outside the rooms */
#define IFD_MAY_USE_MODEL 1
#define IFD_MAY_USE_TOKENIZER 1
#define IFD_MAY_USE_TEMPLATE 1
#define IFD_MAY_USE_GRAMMAR 1
#define IFD_MAY_USE_BACKEND 1
#define IFD_MAY_USE_ENGINE 1
#define IFD_MAY_USE_KVX 1
#define IFD_MAY_USE_SERVER 1
#define IFD_MAY_USE_CLI 1
#define IFD_MAY_USE_KERNELS 1
#define IFD_MAY_USE_ENGINE_MODEL 1
#endif

#ifdef __cplusplus
#define IFD_LAYER_ASSERT_ static_assert
#else
#define IFD_LAYER_ASSERT_ _Static_assert
#endif
/* At file scope in each header of ROOM (through util/layer/<room>.h). */
#define IFD_LAYER(ROOM)                                                                        \
    IFD_LAYER_ASSERT_(IFD_MAY_USE_##ROOM, "layering: this room may not include a " #ROOM       \
                                          " header (DESIGN.md Layout; src/util/layering.h)")

#endif
