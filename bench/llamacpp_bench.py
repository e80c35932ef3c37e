"""llama.cpp's pp512 and tg128 on a GGUF file through llama-cpp-python (the anchor of
the engine benchmarks). Prints "PP_TOK_S TG_TOK_S". Usage: llamacpp_bench.py FILE [THREADS]"""
import sys
import time

import llama_cpp

path = sys.argv[1]
n_threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
llm = llama_cpp.Llama(model_path=path, n_threads=n_threads, n_threads_batch=n_threads,
                      n_ctx=1024, n_batch=512, verbose=False)
toks = [1] + [(i * 131) % 30000 + 100 for i in range(511)]
best = float("inf")
for _ in range(2):
    llm.reset()
    t0 = time.time()
    llm.eval(toks)
    best = min(best, time.time() - t0)
llm.reset()
llm.eval(toks[:8])
t0 = time.time()
for i in range(128):
    llm.eval([toks[8 + i]])
dt = time.time() - t0
print(f"{512 / best:.1f} {128 / dt:.1f}")
