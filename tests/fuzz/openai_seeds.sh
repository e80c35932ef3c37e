#!/usr/bin/env bash
# openai_seeds.sh DIR — write the seed corpus of fuzz_openai into DIR: small valid
# request bodies for /v1/chat/completions and /v1/completions that together use every
# field the parser reads, the roles, content parts, tools, token-id prompts, escapes
# (surrogate pairs, raw UTF-8) and integer literals at the int64 edges. Used by
# tests/fuzz/run_fuzz.sh and by the fuzz_openai_smoke ctest.
set -euo pipefail
if [ $# -ne 1 ]; then
    echo "usage: $0 DIR" >&2
    exit 2
fi
dir=$1
mkdir -p "$dir"
n=0
seed() { # NAME JSON
    printf '%s' "$2" >"$dir/seed-$1.json"
    n=$((n + 1))
}

seed chat-min '{"messages":[{"role":"user","content":"hi"}]}'
seed chat-sampling '{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}],"max_tokens":16,"max_completion_tokens":8,"temperature":0.7,"top_p":0.9,"top_k":40,"min_p":0.05,"presence_penalty":0.5,"frequency_penalty":-0.5,"repetition_penalty":1.1,"seed":9223372036854775807,"n":2,"stop":["\n\n","END"],"stop_token_ids":[2,7],"logit_bias":{"0":-100,"31999":5.5},"logprobs":true,"top_logprobs":5,"ignore_eos":false,"user":"u1","response_format":{"type":"text"}}'
seed chat-stream '{"messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"seed":-9223372036854775808}'
seed chat-tools '{"messages":[{"role":"developer","content":"Use tools."},{"role":"user","content":[{"type":"text","text":"Weather in Paris?"},{"type":"text","text":"And Oslo."}]},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},{"role":"tool","tool_call_id":"call_1","content":"sunny"},{"role":"function","name":"get_weather","content":"rain"}],"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather by city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}],"tool_choice":"auto","parallel_tool_calls":true}'
seed chat-template '{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Once upon"}],"continue_final_message":true,"add_generation_prompt":false,"chat_template_kwargs":{"enable_thinking":false,"documents":[{"title":"a","text":"b"}]},"chat_template":"{{ messages[0].content }}"}'
seed comp-text '{"model":"m","prompt":"ROMEO:","max_tokens":8,"temperature":0,"echo":true,"suffix":"","best_of":1}'
seed comp-ids '{"prompt":[1,2,3,31999],"logprobs":3,"n":1}'
seed comp-texts '{"prompt":["a","b","c"],"logprobs":false,"stop":"x"}'
seed comp-id-lists '{"prompt":[[1,2],[3]],"max_tokens":1.0,"n":2e0,"top_k":-1,"seed":1e1}'
seed unicode '{"prompt":"\u00e9\ud83d\ude00 caf\u00e9 \u4e2d\u6587 \"q\" \\ \/ \b\f\n\r\t é€😀"}'
seed tokenize '{"prompt":"ROMEO:","add_special_tokens":false,"return_token_strs":true}'
seed nested '{"prompt":"x","extra":[[[{"a":[{"b":{"c":[0,-0,1.5e-3,-2E+2,0.0]}}]}]]],"t":true,"f":false,"z":null}'
echo "openai_seeds: $n seeds in $dir"
