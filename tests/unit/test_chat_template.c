/* test_chat_template.c — the Jinja interpreter behind chat_template.h.
 *
 * The CASE/ERR tables hold small templates with the output (or error message) that
 * Python jinja2 3.1.6 produced for them under transformers' configuration
 * (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, tojson =
 * json.dumps(ensure_ascii=False), raise_exception, strftime_now fixed at
 * 2026-11-29 12:00:00). tests/python/test_chat_templates.py re-checks every table
 * entry against jinja2 when it is installed, so the expectations cannot drift.
 * The rest covers what jinja2 cannot tell us: limits, threads, API errors, and a
 * no-crash sweep over mutated templates. Run one group: test_chat_template NAME. */
#include <pthread.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "template/chat_template.h"
#include "test_util.h"
#include "util/common.h"

typedef struct tcase {
    const char *name, *tmpl, *ctx, *want;
    int rc;
} tcase;

#define CASE(n, t, c, w) {n, t, c, w, IFD_OK}
#define ERR(n, t, c, w) {n, t, c, w, IFD_ERR_TEMPLATE}

#define FIXED_NOW "2026-11-29 12:00:00"

/* Render src with ctx_json (NULL = no context). Returns the status; *out / err hold
 * the result. Parse errors come back as the status of chat_template_create. */
static int render(const char *src, const char *ctx_json, const chat_template_limits *lim, char **out,
                  size_t *out_n, char *err, size_t err_bytes) {
    *out = NULL;
    chat_template *t = NULL;
    int rc = chat_template_create(&t, src, strlen(src), err, err_bytes);
    if (rc) return rc;
    cJSON *ctx = ctx_json ? cJSON_Parse(ctx_json) : NULL;
    if (ctx_json && !ctx) {
        chat_template_destroy(t);
        snprintf(err, err_bytes, "bad test JSON");
        return IFD_ERR_INVALID;
    }
    chat_template_limits l = lim ? *lim : (chat_template_limits){0};
    if (!l.fixed_now) l.fixed_now = FIXED_NOW;
    rc = chat_template_render(t, ctx, &l, out, out_n, err, err_bytes);
    cJSON_Delete(ctx);
    chat_template_destroy(t);
    return rc;
}

static void run_table(const tcase *cs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const tcase *c = &cs[i];
        char err[512] = "";
        char *out = NULL;
        size_t out_n = 0;
        int rc = render(c->tmpl, c->ctx, NULL, &out, &out_n, err, sizeof(err));
        if (c->rc == IFD_OK) {
            CHECKF(rc == IFD_OK, "[%s] rc %d: %s", c->name, rc, err);
            if (rc == IFD_OK)
                CHECKF(out_n == strlen(c->want) && !memcmp(out, c->want, out_n),
                       "[%s]\n    want: %s\n    got:  %.*s", c->name, c->want, (int)out_n, out);
        } else {
            CHECKF(rc == IFD_ERR_TEMPLATE, "[%s] want an error, got rc %d (%s)", c->name, rc,
                   out ? out : err);
            CHECKF(!strcmp(err, c->want), "[%s]\n    want error: %s\n    got error:  %s", c->name,
                   c->want, err);
        }
        free(out);
    }
}

/* ---- tables (generated from jinja2; see the header comment) ---------------------- */

static const tcase LOOPS[] = {
    CASE("for list", "{% for x in [1, 2, 3] %}{{ x }},{% endfor %}",
         NULL,
         "1,2,3,"),
    CASE("for else empty", "{% for x in [] %}{{ x }}{% else %}none{% endfor %}",
         NULL,
         "none"),
    CASE("for filter", "{% for x in range(10) if x is even %}{{ x }}{% endfor %}",
         NULL,
         "02468"),
    CASE("for filter loop.index", "{% for x in [1, 2, 3, 4] if x > 2 %}{{ loop.index }}/{{ loop.length }} {% endfor %}",
         NULL,
         "1/2 2/2 "),
    CASE("unpack items()", "{% for k, v in {'b': 1, 'a': 2}.items() %}{{ k }}={{ v }};{% endfor %}",
         NULL,
         "b=1;a=2;"),
    CASE("unpack items filter", "{% for k, v in d|items %}{{ k }}:{{ v }} {% endfor %}",
         "{\"d\": {\"x\": 1, \"y\": [1, 2]}}",
         "x:1 y:[1, 2] "),
    CASE("dict iterates keys", "{% for k in {'z': 1, 'a': 2} %}{{ k }}{% endfor %}",
         NULL,
         "za"),
    CASE("string iterates chars", "{% for c in \"h\xc3\xa9llo\" %}[{{ c }}]{% endfor %}",
         NULL,
         "[h][\xc3\xa9][l][l][o]"),
    CASE("undefined iterates empty", "{% for x in nothing %}x{% else %}empty{% endfor %}",
         NULL,
         "empty"),
    CASE("break continue", "{% for i in range(10) %}{% if i is odd %}{% continue %}{% endif %}{% if i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}",
         NULL,
         "0246"),
    CASE("nested loops", "{% for a in [1, 2] %}{% for b in \"xy\" %}{{ a }}{{ b }}{{ loop.index }} {% endfor %}{{ loop.index }};{% endfor %}",
         NULL,
         "1x1 1y2 1;2x1 2y2 2;"),
    CASE("recursive loop", "{% for n in tree recursive %}({{ n.name }}{% if n.kids %}:{{ loop(n.kids) }}{% endif %}){% endfor %}",
         "{\"tree\": [{\"name\": \"a\", \"kids\": [{\"name\": \"b\", \"kids\": []}, {\"name\": \"c\"}]}, {\"name\": \"d\"}]}",
         "(a:(b)(c))(d)"),
    CASE("messages", "{% for m in messages %}<{{ m.role }}>{{ m['content'] }}{% endfor %}",
         "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}, {\"role\": \"user\", \"content\": \"bye\"}]}",
         "<system>S<user>hi<assistant>yo<user>bye"),
    CASE("reverse slice", "{% for m in messages[::-1] %}{{ m.content }}{% endfor %}",
         "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}, {\"role\": \"user\", \"content\": \"bye\"}]}",
         "byeyohiS"),
};

static const tcase LOOPVARS[] = {
    CASE("index/index0/revindex", "{% for x in \"abc\" %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }} {% endfor %}",
         NULL,
         "1032 2121 3210 "),
    CASE("first/last/length", "{% for x in \"abc\" %}{{ loop.first }}-{{ loop.last }}-{{ loop.length }} {% endfor %}",
         NULL,
         "True-False-3 False-False-3 False-True-3 "),
    CASE("previtem/nextitem", "{% for x in [1, 2, 3] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}|{% endfor %}",
         NULL,
         "<1>2|1<2>3|2<3>|"),
    CASE("cycle", "{% for x in range(5) %}{{ loop.cycle('odd', 'even') }} {% endfor %}",
         NULL,
         "odd even odd even odd "),
    CASE("changed", "{% for x in [1, 1, 2, 2, 1] %}{{ loop.changed(x) }} {% endfor %}",
         NULL,
         "True False True False True "),
    CASE("depth", "{% for x in [[1]] recursive %}{{ loop.depth }}{{ loop.depth0 }}{% if x is iterable %}{{ loop(x) }}{% endif %}{% endfor %}",
         NULL,
         "1021"),
    CASE("loop not visible outside", "{% for x in [1] %}{% endfor %}{{ loop is defined }}",
         NULL,
         "False"),
};

static const tcase SCOPE[] = {
    CASE("set in loop does not leak", "{% set x = 1 %}{% for i in range(3) %}{% set x = x + 10 %}{{ x }} {% endfor %}{{ x }}",
         NULL,
         "11 11 11 1"),
    CASE("set per iteration is fresh", "{% for i in range(3) %}{% if i == 0 %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}",
         NULL,
         "[5][][]"),
    CASE("if shares scope", "{% if true %}{% set x = 3 %}{% endif %}{{ x }}",
         NULL,
         "3"),
    CASE("namespace", "{% set ns = namespace(n=0, s=\"\") %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}",
         NULL,
         "6 0123"),
    CASE("namespace from dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}",
         NULL,
         "12"),
    CASE("namespace missing attr", "{% set ns = namespace() %}[{{ ns.nope }}]{{ ns.nope is defined }}",
         NULL,
         "[]False"),
    CASE("block set", "{% set x %}Hello {{ \"world\" }}!{% endset %}[{{ x }}]",
         NULL,
         "[Hello world!]"),
    CASE("block set with filter", "{% set x | upper | replace(\"L\", \"_\") %}hello{% endset %}{{ x }}",
         NULL,
         "HE__O"),
    CASE("tuple set", "{% set a, b = \"xy\" %}{{ b }}{{ a }}",
         NULL,
         "yx"),
    CASE("with", "{% set a = 0 %}{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}",
         NULL,
         "30"),
    CASE("ctx variable overridden", "{% set messages = messages[1:] %}{{ messages|length }}",
         "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}, {\"role\": \"user\", \"content\": \"bye\"}]}",
         "3"),
    CASE("defined test on ctx", "{{ bos_token is defined }}{{ custom is defined }}",
         "{\"bos_token\": \"<s>\"}",
         "TrueFalse"),
};

static const tcase MACROS[] = {
    CASE("defaults and kwargs", "{% macro g(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ g('Bob') }} {{ g('Al', punct='?') }} {{ g(greeting='Hi', name='X') }}",
         NULL,
         "Hello, Bob! Hello, Al? Hi, X!"),
    CASE("missing arg is undefined", "{% macro m(a, b) %}[{{ a }}][{{ b }}]{{ b is defined }}{% endmacro %}{{ m(1) }}",
         NULL,
         "[1][]False"),
    CASE("caller", "{% macro box(title) %}<{{ title }}>{{ caller() }}</{{ title }}>{% endmacro %}{% call box(\"b\") %}inside{% endcall %}",
         NULL,
         "<b>inside</b>"),
    CASE("caller with args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(v) each([1, 2]) %}<{{ v * 10 }}>{% endcall %}",
         NULL,
         "<10><20>"),
    CASE("varargs kwargs", "{% macro m(a) %}{{ a }}|{{ varargs }}|{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=\"v\") }}",
         NULL,
         "1|(2, 3)|{'k': 'v'}"),
    CASE("recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(6) }}",
         NULL,
         "720"),
    CASE("macro sees globals at call time", "{% macro m() %}{{ v }}{% endmacro %}{% set v = \"late\" %}{{ m() }}",
         NULL,
         "late"),
    CASE("macro output is a string", "{% macro m() %}12{% endmacro %}{{ m() ~ \"3\" }}|{{ m() + \"4\" }}|{{ m()|length }}",
         NULL,
         "123|124|2"),
    CASE("nested type macro", "{%- macro t(s) -%}{%- if s.type == 'array' -%}list[{{ t(s['items']) }}]{%- elif s.type is string -%}{{ s.type }}{%- else -%}Union[{%- for x in s.type -%}{{ x }}{{ ',' if not loop.last }}{%- endfor -%}]{%- endif -%}{%- endmacro -%}{{ t({'type': 'array', 'items': {'type': ['string', 'null']}}) }}",
         NULL,
         "list[Union[string,null]]"),
};

static const tcase SLICING[] = {
    CASE("string slices", "{{ \"hello\"[1:3] }}|{{ \"hello\"[-3:] }}|{{ \"hello\"[:-1] }}|{{ \"hello\"[::2] }}|{{ \"hello\"[::-1] }}|{{ \"hello\"[4:1:-1] }}",
         NULL,
         "el|llo|hell|hlo|olleh|oll"),
    CASE("unicode slices", "{{ \"h\xc3\xa9llo w\xc3\xb6rld\"[1:4] }}|{{ \"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\"[::-1] }}|{{ \"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\"[-1] }}",
         NULL,
         "\xc3\xa9ll|\xe8\xaa\x9e\xe6\x9c\xac\xe6\x97\xa5|\xe8\xaa\x9e"),
    CASE("list slices", "{{ [1, 2, 3, 4, 5][1:4] }}|{{ [1, 2, 3, 4, 5][::-2] }}|{{ [1, 2, 3][5:] }}|{{ [1, 2, 3][-100:1] }}|{{ (1, 2, 3)[1:] }}",
         NULL,
         "[2, 3, 4]|[5, 3, 1]|[]|[1]|(2, 3)"),
    CASE("index", "{{ [1, 2, 3][-1] }}{{ \"abc\"[0] }}{{ [1, 2][5] }}|{{ {\"a\": 1}[\"a\"] }}",
         NULL,
         "3a|1"),
    CASE("split()[-1]", "{{ '<think>x</think>answer'.split('</think>')[-1] }}",
         NULL,
         "answer"),
};

static const tcase FILTERS[] = {
    CASE("length count", "{{ [1, 2]|length }}{{ 'h\xc3\xa9llo'|length }}{{ {'a': 1}|count }}{{ nothing|length }}",
         NULL,
         "2510"),
    CASE("case filters", "{{ 'hello world'|upper }}|{{ 'HeLLo'|lower }}|{{ 'hello big-world (x)'|title }}|{{ 'hELLO wORLD'|capitalize }}",
         NULL,
         "HELLO WORLD|hello|Hello Big-World (X)|Hello world"),
    CASE("trim", "[{{ '  a b \\n'|trim }}][{{ 'xxaxx'|trim('x') }}]",
         NULL,
         "[a b][a]"),
    CASE("replace", "{{ 'aaa'|replace('a', 'b') }}|{{ 'aaa'|replace('a', 'b', 2) }}",
         NULL,
         "bbb|bba"),
    CASE("join", "{{ [1, 2, 3]|join }}|{{ ['a', 'b']|join(', ') }}|{{ [{'n': 'x'}, {'n': 'y'}]|join('+', attribute='n') }}",
         NULL,
         "123|a, b|x+y"),
    CASE("first last list", "{{ [3, 4]|first }}{{ [3, 4]|last }}{{ 'ab'|list }}{{ {'k': 1}|list }}{{ []|first is defined }}",
         NULL,
         "34['a', 'b']['k']False"),
    CASE("default", "{{ nothing|default('d') }}|{{ ''|default('d') }}|{{ ''|default('d', true) }}|{{ none|d('n', boolean=true) }}|{{ 0|default(5) }}",
         NULL,
         "d||d|n|0"),
    CASE("string int float abs round", "{{ 5|string + '!' }}|{{ '42'|int + 1 }}|{{ 'x'|int(7) }}|{{ '3.5'|float * 2 }}|{{ -3|abs }}|{{ 2.567|round(2) }}|{{ 2.5|round }}|{{ 3.14|round(1, 'floor') }}|{{ 7|round }}",
         NULL,
         "5!|43|7|7.0|3|2.57|2.0|3.1|7"),
    CASE("map", "{{ [1, 2]|map('string')|join('-') }}|{{ [{'a': {'b': 1}}, {'a': {'b': 2}}]|map(attribute='a.b')|list }}|{{ ['x', 'Y']|map('upper')|list }}",
         NULL,
         "1-2|[1, 2]|['X', 'Y']"),
    CASE("select reject", "{{ [1, 2, 3, 4, 5]|select('odd')|list }}|{{ [1, 2, 3]|reject('equalto', 2)|list }}|{{ [0, 1, '', 'a', none]|select|list }}|{{ [1, 5, 10]|select('gt', 4)|list }}",
         NULL,
         "[1, 3, 5]|[1, 3]|[1, 'a']|[5, 10]"),
    CASE("selectattr rejectattr", "{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(',') }}|{{ messages|rejectattr('role', 'in', ['user', 'system'])|list|length }}",
         "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}, {\"role\": \"user\", \"content\": \"bye\"}]}",
         "hi,bye|1"),
    CASE("items dictsort", "{{ {'b': 2, 'a': 1}|items|list }}|{{ {'b': 2, 'A': 1, 'c': 0}|dictsort }}|{{ {'b': 2, 'a': 1}|dictsort(by='value', reverse=true) }}",
         NULL,
         "[('b', 2), ('a', 1)]|[('A', 1), ('b', 2), ('c', 0)]|[('b', 2), ('a', 1)]"),
    CASE("sort unique reverse", "{{ [3, 1, 2]|sort }}|{{ ['b', 'A', 'c']|sort }}|{{ ['b', 'A', 'c']|sort(case_sensitive=true, reverse=true) }}|{{ [{'v': 2}, {'v': 1}]|sort(attribute='v')|map(attribute='v')|list }}|{{ ['a', 'A', 'b']|unique|list }}|{{ [1, 2, 3]|reverse|list }}|{{ 'abc'|reverse }}",
         NULL,
         "[1, 2, 3]|['A', 'b', 'c']|['c', 'b', 'A']|[1, 2]|['a', 'b']|[3, 2, 1]|cba"),
    CASE("min max sum", "{{ [3, 1, 2]|min }}{{ [3, 1, 2]|max }}{{ [3, 1, 2]|sum }}|{{ [{'p': 2}, {'p': 5}]|sum(attribute='p') }}|{{ ['b', 'A']|max }}|{{ []|max is defined }}",
         NULL,
         "136|7|b|False"),
    CASE("indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, first=true) }}|{{ 'a\\n\\nb'|indent('> ', blank=true) }}",
         NULL,
         "a\n    b\n\n    c|  a\n  b|a\n> \n> b"),
    CASE("batch slice wordcount center", "{{ [1, 2, 3, 4, 5]|batch(2, 0)|list }}|{{ [1, 2, 3, 4, 5]|slice(2)|list }}|{{ 'one two  three'|wordcount }}|[{{ 'ab'|center(6) }}]",
         NULL,
         "[[1, 2], [3, 4], [5, 0]]|[[1, 2, 3], [4, 5]]|3|[  ab  ]"),
    CASE("escape safe", "{{ '<a href=\"x\">&\\''|e }}|{{ '<b>'|safe }}|{{ '<b>'|safe + '<i>' }}|{{ '<b>'|escape|escape }}",
         NULL,
         "&lt;a href=&#34;x&#34;&gt;&amp;&#39;|<b>|<b>&lt;i&gt;|&lt;b&gt;"),
    CASE("format truncate", "{{ '%s=%d'|format('x', 3) }}|{{ '%(a)s'|format(a=1) }}|{{ 'hello world foo'|truncate(11) }}|{{ 'hello world foo'|truncate(11, true, '..') }}",
         NULL,
         "x=3|1|hello world foo|hello world foo"),
    CASE("filter block", "{% filter upper %}shout {{ \"it\" }}{% endfilter %}",
         NULL,
         "SHOUT IT"),
    CASE("groupby", "{% for k, g in [{'t': 'b', 'v': 1}, {'t': 'a', 'v': 2}, {'t': 'b', 'v': 3}]|groupby('t') %}{{ k }}={{ g|map(attribute='v')|join(',') }};{% endfor %}",
         NULL,
         "a=2;b=1,3;"),
};

static const tcase TESTS[] = {
    CASE("type tests", "{{ 'a' is string }}{{ 1 is number }}{{ 1.5 is number }}{{ true is number }}{{ 1 is integer }}{{ true is integer }}{{ 1.0 is float }}{{ {} is mapping }}{{ [] is mapping }}{{ none is none }}{{ true is boolean }}{{ 1 is boolean }}",
         NULL,
         "TrueTrueTrueTrueTrueFalseTrueTrueFalseTrueTrueFalse"),
    CASE("iterable sequence", "{{ [] is iterable }}{{ 'a' is iterable }}{{ {} is iterable }}{{ 1 is iterable }}{{ [] is sequence }}{{ 'x' is sequence }}{{ 5 is sequence }}{{ nothing is iterable }}",
         NULL,
         "TrueTrueTrueFalseTrueTrueFalseTrue"),
    CASE("defined undefined", "{{ x is defined }}{{ x is undefined }}{{ y is defined }}{{ y.z is defined }}{{ y.a is not defined }}",
         "{\"y\": {\"a\": 1}}",
         "FalseTrueTrueFalseFalse"),
    CASE("true false", "{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}{{ none is false }}",
         NULL,
         "TrueFalseTrueFalseFalse"),
    CASE("numeric tests", "{{ 3 is odd }}{{ 3 is even }}{{ 10 is divisibleby 5 }}{{ 10 is divisibleby(3) }}{{ -4 is even }}",
         NULL,
         "TrueFalseTrueFalseTrue"),
    CASE("comparison tests", "{{ 1 is eq 1 }}{{ 1 is equalto 2 }}{{ 2 is ne 3 }}{{ 2 is gt 1 }}{{ 2 is lt 1 }}{{ 2 is ge 2 }}{{ 2 is le 1 }}{{ 1 is in [1, 2] }}{{ 'a' is in 'cat' }}",
         NULL,
         "TrueFalseTrueTrueFalseTrueFalseTrueTrue"),
    CASE("string case tests", "{{ 'abc' is lower }}{{ 'aBc' is lower }}{{ 'ABC' is upper }}{{ '12' is upper }}",
         NULL,
         "TrueFalseTrueFalse"),
    CASE("not and sameas", "{{ none is not none }}{{ x is not defined }}{{ none is sameas none }}{{ true is sameas true }}{{ 'upper' is filter }}{{ 'odd' is test }}{{ 'zzz' is filter }}",
         NULL,
         "FalseTrueTrueTrueTrueTrueFalse"),
    CASE("in operators", "{{ 'a' in 'cat' }}{{ 1 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 3 not in [1, 2] }}{{ 'z' in nothing }}",
         NULL,
         "TrueTrueTrueTrueFalse"),
};

static const tcase WHITESPACE[] = {
    CASE("trim_blocks", "{% if true %}\nyes\n{% endif %}\nend",
         NULL,
         "yes\nend"),
    CASE("lstrip_blocks", "  {% if true %}\n    body\n  {% endif %}\n  tail",
         NULL,
         "    body\n  tail"),
    CASE("dash strips both sides", "a  \n  {%- if true -%}  \n  b  \n  {%- endif -%}  \n  c",
         NULL,
         "abc"),
    CASE("variable dashes", "x  {{- \"y\" -}}  z\n{{ \"w\" }}\n",
         NULL,
         "xyz\nw"),
    CASE("plus disables lstrip", "  {%+ if true %}kept{% endif %}",
         NULL,
         "  kept"),
    CASE("plus keeps newline", "{% if true +%}\nnewline kept{% endif %}",
         NULL,
         "\nnewline kept"),
    CASE("comments", "a {# note #} b\n  {# own line #}\nc {#- trim -#} d",
         NULL,
         "a  b\ncd"),
    CASE("raw", "{% raw %}{{ not rendered }} {% if %}{% endraw %}!",
         NULL,
         "{{ not rendered }} {% if %}!"),
    CASE("trailing newline dropped", "line\n",
         NULL,
         "line"),
    CASE("crlf normalized", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc",
         NULL,
         "a\nb\nc"),
};

static const tcase STRINGS[] = {
    CASE("strip family", "[{{ '  x  '.strip() }}][{{ 'xyx'.strip('x') }}][{{ '\\n\\nhi\\n'.lstrip('\\n') }}][{{ 'hi \\t'.rstrip() }}]",
         NULL,
         "[x][y][hi\n][hi]"),
    CASE("split", "{{ 'a b  c'.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ '  a  b '.split(none, 1) }}|{{ 'x\\ny'.splitlines() }}",
         NULL,
         "['a', 'b', 'c']|['a', 'b', '', 'c']|['a', 'b,c']|['a,b', 'c']|['a', 'b ']|['x', 'y']"),
    CASE("startswith endswith", "{{ 'hello'.startswith('he') }}{{ 'hello'.startswith(('x', 'h')) }}{{ 'hello'.endswith('lo') }}{{ 'hello'.endswith('x') }}{{ 'hello'.startswith('l', 2) }}",
         NULL,
         "TrueTrueTrueFalseTrue"),
    CASE("case methods", "{{ 'hello world'.upper() }}|{{ 'HeLLo'.lower() }}|{{ \"they're bill's\".title() }}|{{ 'hELLO'.capitalize() }}|{{ 'AbC'.swapcase() }}",
         NULL,
         "HELLO WORLD|hello|They'Re Bill'S|Hello|aBc"),
    CASE("find count replace", "{{ 'hello'.find('l') }}{{ 'hello'.rfind('l') }}{{ 'hello'.find('z') }}{{ 'hello'.count('l') }}|{{ 'a-b-c'.replace('-', '+') }}|{{ 'a-b-c'.replace('-', '', 1) }}",
         NULL,
         "23-12|a+b+c|ab-c"),
    CASE("format and join", "{{ '{} + {} = {}'.format(1, 2, 3) }}|{{ '{name}:{0}'.format('x', name='n') }}|{{ '{:>6.2f}|{:<4}|{:^5}|{:03d}'.format(3.14159, 'ab', 'c', 7) }}|{{ '-'.join(['a', 'b']) }}",
         NULL,
         "1 + 2 = 3|n:x|  3.14|ab  |  c  |007|a-b"),
    CASE("percent operator", "{{ '%s is %d years' % ('Al', 30) }}|{{ '%.2f%%' % 12.345 }}|{{ '%5s|%-5s|' % ('a', 'b') }}|{{ '%x' % 255 }}",
         NULL,
         "Al is 30 years|12.35%|    a|b    ||ff"),
    CASE("concat tilde", "{{ 'a' ~ 1 ~ none ~ true ~ 1.5 ~ [1] }}|{{ 'a' + 'b' }}|{{ 'ab' * 3 }}",
         NULL,
         "a1NoneTrue1.5[1]|ab|ababab"),
    CASE("escapes in literals", "{{ 'tab\\there' }}|{{ \"quote\\\"s\" }}|{{ '\\u00e9\\x41' }}|{{ 'a' 'b' }}",
         NULL,
         "tab\there|quote\"s|\xc3\xa9" "A|ab"),
    CASE("more methods", "{{ 'abc'.isalpha() }}{{ '12'.isdigit() }}{{ ' '.isspace() }}{{ 'ab'.zfill(4) }}{{ 'x'.ljust(3, '.') }}{{ 'x'.rjust(3) }}{{ 'a:b'.partition(':') }}{{ 'pre_x'.removeprefix('pre_') }}",
         NULL,
         "TrueTrueTrue00abx..  x('a', ':', 'b')x"),
    CASE("dict methods", "{{ d.get('a') }}|{{ d.get('z') }}|{{ d.get('z', 'dflt') }}|{{ d.keys()|list }}|{{ d.values()|list }}|{{ d.items()|list }}",
         "{\"d\": {\"a\": 1, \"b\": [2]}}",
         "1|None|dflt|['a', 'b']|[1, [2]]|[('a', 1), ('b', [2])]"),
};

static const tcase TOJSON[] = {
    CASE("nested", "{{ {'a': [1, 2.5, none, true], 'b': {'c': 'd'}, 'e': []}|tojson }}",
         NULL,
         "{\"a\": [1, 2.5, null, true], \"b\": {\"c\": \"d\"}, \"e\": []}"),
    CASE("unicode and escapes", "{{ '\xc3\xa9\xe6\x97\xa5\xf0\x9f\xa6\x99 \"q\" \\\\ \\n\\t\\x01'|tojson }}",
         NULL,
         "\"\xc3\xa9\xe6\x97\xa5\xf0\x9f\xa6\x99 \\\"q\\\" \\\\ \\n\\t\\u0001\""),
    CASE("indent", "{{ {'a': [1, {'b': 2}], 'c': {}}|tojson(indent=2) }}",
         NULL,
         "{\n  \"a\": [\n    1,\n    {\n      \"b\": 2\n    }\n  ],\n  \"c\": {}\n}"),
    CASE("ctx tools", "{{ tools|tojson }}",
         "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"string\"}}, \"required\": [\"x\"]}}}]}",
         "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"string\"}}, \"required\": [\"x\"]}}}]"),
    CASE("key order kept and sort_keys", "{{ {'b': 1, 'a': 2}|tojson }}{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}",
         NULL,
         "{\"b\": 1, \"a\": 2}{\"a\": 2, \"b\": 1}"),
    CASE("separators ensure_ascii", "{{ {'a': [1, 2]}|tojson(separators=(',', ':')) }}{{ '\xc3\xa9'|tojson(ensure_ascii=true) }}",
         NULL,
         "{\"a\":[1,2]}\"\\u00e9\""),
    CASE("non-string keys and tuples", "{{ {1: 'a', none: 'b', true: 'c'}|tojson }}{{ (1, 'x')|tojson }}",
         NULL,
         "{\"1\": \"c\", \"null\": \"b\"}[1, \"x\"]"),
    CASE("floats", "{{ [1.0, 0.1, 1e20, 1.5e-7, -0.0, 100.0]|tojson }}",
         NULL,
         "[1.0, 0.1, 1e+20, 1.5e-07, -0.0, 100.0]"),
};

static const tcase OPERATORS[] = {
    CASE("arithmetic", "{{ 1 + 2 * 3 }}|{{ 10 / 4 }}|{{ 10 // 4 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}|{{ 2 ** -1 }}|{{ 7.5 % 2 }}|{{ (1 + 2) * 3 }}",
         NULL,
         "7|2.5|2|-4|2|1024|0.5|1.5|9"),
    CASE("comparison chains", "{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 'a' < 'b' }}{{ [1, 2] < [1, 3] }}{{ 1 == 1.0 }}{{ true == 1 }}{{ 'a' != 'b' }}",
         NULL,
         "TrueFalseTrueTrueTrueTrueTrue"),
    CASE("logic returns operands", "{{ 0 or 'x' }}|{{ 'y' and 'z' }}|{{ none or false }}|{{ not [] }}|{{ 1 if '' else 2 }}|{{ 'v' if true }}|{{ 'v' if false }}|",
         NULL,
         "x|z|False|True|2|v||"),
    CASE("literals", "{{ [1, 'a', none] }}|{{ {'k': (1, 2)} }}|{{ (1,) }}|{{ () }}|{{ [] + [1] }}|{{ True }}{{ False }}{{ None }}",
         NULL,
         "[1, 'a', None]|{'k': (1, 2)}|(1,)|()|[1]|TrueFalseNone"),
    CASE("printing", "{{ none }}|{{ true }}|{{ 1.0 }}|{{ 1e16 }}|{{ 0.1 + 0.2 }}|{{ 1/3 }}|{{ -0.0 }}|{{ 123456789012 }}|{{ x }}|{{ \"it's\" }}|{{ ['it\\'s', \"q\\\"\"] }}",
         NULL,
         "None|True|1.0|1e+16|0.30000000000000004|0.3333333333333333|-0.0|123456789012||it's|[\"it's\", 'q\"']"),
    CASE("ctx values", "{{ n }}|{{ f }}|{{ b }}|{{ nil }}|{{ s }}|{{ l }}|{{ o }}",
         "{\"n\": 3, \"f\": 2.5, \"b\": false, \"nil\": null, \"s\": \"str\", \"l\": [1, \"a\"], \"o\": {\"k\": null}}",
         "3|2.5|False|None|str|[1, 'a']|{'k': None}"),
    CASE("globals", "{{ range(3)|list }}{{ range(1, 7, 2)|list }}{{ range(3, 0, -1)|list }}|{{ dict(a=1) }}|{{ namespace(x=1).x }}",
         NULL,
         "[0, 1, 2][1, 3, 5][3, 2, 1]|{'a': 1}|1"),
    CASE("strftime_now", "{{ strftime_now(\"%Y-%m-%d %H:%M:%S\") }}|{{ strftime_now(\"%d %b %Y, %A\") }}",
         NULL,
         "2026-11-29 12:00:00|29 Nov 2026, Sunday"),
};

static const tcase ERRORS[] = {
    ERR("raise_exception", "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}",
         NULL,
         "Conversation roles must alternate user/assistant/user/assistant/..."),
    ERR("raise_exception in loop", "{% for m in messages %}{% if m.role == 'assistant' %}{{ raise_exception('bad role: ' ~ m.role) }}{% endif %}{% endfor %}",
         "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}, {\"role\": \"user\", \"content\": \"bye\"}]}",
         "bad role: assistant"),
    ERR("undefined attribute of undefined", "{{ x.y }}",
         NULL,
         "'x' is undefined"),
    ERR("attribute of missing attribute", "{{ d.missing.deeper }}",
         "{\"d\": {\"a\": 1}}",
         "'dict object' has no attribute 'missing'"),
    ERR("missing element", "{{ l[5].x }}",
         "{\"l\": [1]}",
         "list object has no element 5"),
    ERR("none attribute then use", "{{ n.x.y }}",
         "{\"n\": null}",
         "'None' has no attribute 'x'"),
    ERR("str plus none", "{{ 'a' + none }}",
         NULL,
         "can only concatenate str (not \"NoneType\") to str"),
    ERR("in none", "{{ 'x' in none }}",
         NULL,
         "argument of type 'NoneType' is not iterable"),
    ERR("int plus str", "{{ 1 + 'a' }}",
         NULL,
         "unsupported operand type(s) for +: 'int' and 'str'"),
    ERR("compare str int", "{{ 'a' < 1 }}",
         NULL,
         "'<' not supported between instances of 'str' and 'int'"),
    ERR("iterate none", "{% for x in none %}{% endfor %}",
         NULL,
         "'NoneType' object is not iterable"),
    ERR("call undefined", "{{ nope() }}",
         NULL,
         "'nope' is undefined"),
    ERR("call string", "{{ 'x'() }}",
         NULL,
         "'str' object is not callable"),
    ERR("unknown filter at render", "{{ 1|nosuchfilter }}",
         NULL,
         "No filter named 'nosuchfilter'."),
    ERR("unknown test", "{{ 1 is nosuchtest }}",
         NULL,
         "No test named 'nosuchtest'."),
    ERR("sandbox list append", "{{ [].append(1) }}",
         NULL,
         "access to attribute 'append' of 'list' object is unsafe."),
    ERR("sandbox dict pop", "{{ {'a': 1}.pop('a') }}",
         NULL,
         "access to attribute 'pop' of 'dict' object is unsafe."),
    ERR("namespace assign on non-namespace", "{% set x = 1 %}{% set x.y = 2 %}",
         NULL,
         "cannot assign attribute on non-namespace object"),
    ERR("division by zero", "{{ 1 / 0 }}",
         NULL,
         "division by zero"),
    ERR("unpack mismatch", "{% for a, b in [[1, 2, 3]] %}{% endfor %}",
         NULL,
         "too many values to unpack (expected 2)"),
    ERR("macro too many args", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}",
         NULL,
         "macro 'm' takes not more than 1 argument(s)"),
    ERR("macro unknown kwarg", "{% macro m(a) %}{% endmacro %}{{ m(b=1) }}",
         NULL,
         "macro 'm' takes no keyword argument 'b'"),
    ERR("tojson undefined", "{{ x|tojson }}",
         NULL,
         "Object of type Undefined is not JSON serializable"),
    ERR("range too big", "{{ range(1000000)|length }}",
         NULL,
         "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000)."),
    ERR("first of empty then attr", "{{ ([]|first).x }}",
         NULL,
         "No first item, sequence was empty."),
    ERR("int of undefined", "{{ (m.missing|int) + 1 }}",
         "{\"m\": {\"role\": \"user\"}}",
         "'dict object' has no attribute 'missing'"),
    ERR("undefined in string", "{{ nope in 'abc' }}",
         NULL,
         "'in <string>' requires string as left operand, not Undefined"),
};


static void test_loops(void) { run_table(LOOPS, IFD_ARRAY_LEN(LOOPS)); }
static void test_loopvars(void) { run_table(LOOPVARS, IFD_ARRAY_LEN(LOOPVARS)); }
static void test_scope(void) { run_table(SCOPE, IFD_ARRAY_LEN(SCOPE)); }
static void test_macros(void) { run_table(MACROS, IFD_ARRAY_LEN(MACROS)); }
static void test_slicing(void) { run_table(SLICING, IFD_ARRAY_LEN(SLICING)); }
static void test_filters(void) { run_table(FILTERS, IFD_ARRAY_LEN(FILTERS)); }
static void test_tests(void) { run_table(TESTS, IFD_ARRAY_LEN(TESTS)); }
static void test_whitespace(void) { run_table(WHITESPACE, IFD_ARRAY_LEN(WHITESPACE)); }
static void test_strings(void) { run_table(STRINGS, IFD_ARRAY_LEN(STRINGS)); }
static void test_tojson(void) { run_table(TOJSON, IFD_ARRAY_LEN(TOJSON)); }
static void test_operators(void) { run_table(OPERATORS, IFD_ARRAY_LEN(OPERATORS)); }
static void test_errors(void) { run_table(ERRORS, IFD_ARRAY_LEN(ERRORS)); }

/* ---- limits ------------------------------------------------------------------------ */

static void expect_limit(const char *name, const char *src, const chat_template_limits *lim,
                         const char *msg_part) {
    char err[512] = "", *out = NULL;
    size_t n = 0;
    double t0 = ifd_now_s();
    int rc = render(src, NULL, lim, &out, &n, err, sizeof(err));
    double dt = ifd_now_s() - t0;
    CHECKF(rc == IFD_ERR_LIMIT, "[%s] rc %d, err '%s'", name, rc, err);
    CHECKF(out == NULL, "[%s] output on failure", name);
    CHECKF(strstr(err, msg_part) != NULL, "[%s] message '%s' lacks '%s'", name, err, msg_part);
    CHECKF(dt < 5.0, "[%s] took %.2f s", name, dt);
    free(out);
}

static void test_limit_steps(void) {
    chat_template_limits lim = {.max_steps = 100000, .max_seconds = 30};
    expect_limit("nested loops", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                 &lim, "steps");
    /* the default limits stop it too (steps or time, whichever comes first) */
    expect_limit("defaults", "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}",
                 NULL, "exceeded");
}

static void test_limit_time(void) {
    chat_template_limits lim = {.max_seconds = 0.05, .max_steps = UINT64_MAX};
    double t0 = ifd_now_s();
    expect_limit("time", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                 &lim, "time");
    CHECKF(ifd_now_s() - t0 < 1.0, "time limit took %.2f s", ifd_now_s() - t0);
}

static void test_limit_output(void) {
    expect_limit("huge output", "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", NULL, "output");
    expect_limit("doubling string",
                 "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                 NULL, "limit");
    expect_limit("string repeat", "{{ 'abc' * 100000000 }}", NULL, "limit");
    chat_template_limits lim = {.max_output_bytes = 10};
    expect_limit("small cap", "hello world!", &lim, "10 bytes");
    char err[256], *out = NULL;
    size_t n = 0;
    CHECK(render("0123456789", NULL, &lim, &out, &n, err, sizeof(err)) == IFD_OK && n == 10);
    free(out);
}

static void test_limit_memory(void) {
    chat_template_limits lim = {.max_memory_bytes = (size_t)16 << 20, .max_seconds = 30, .max_steps = UINT64_MAX};
    expect_limit("quadratic list growth",
                 "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}{% endfor %}",
                 &lim, "memory");
}

static void test_limit_recursion(void) {
    expect_limit("macro recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, "recursion");
    expect_limit("recursive loop", "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}", NULL, "recursion");
}

/* ---- parsing ------------------------------------------------------------------------ */

static void expect_parse_error(const char *src) {
    chat_template *t = NULL;
    char err[256] = "";
    int rc = chat_template_create(&t, src, strlen(src), err, sizeof(err));
    CHECKF(rc == IFD_ERR_TEMPLATE, "'%s': rc %d", src, rc);
    CHECKF(t == NULL && err[0], "'%s': no message", src);
    chat_template_destroy(t);
}

static void test_parse_errors(void) {
    static const char *const BAD[] = {
        "{% if %}",           "{{ }}",                   "{% for x %}{% endfor %}",
        "{% endfor %}",       "{{ 'unterminated }}",     "{% raw %}x",
        "{# x",               "{{ a b }}",               "{% set 1 = 2 %}",
        "{% if x %}",         "{% for x in y %}",        "{% macro m(a=1, b) %}{% endmacro %}",
        "{% break %}",        "{{ (1 }}",                "{{ [1, 2 }}",
        "{{ x | }}",          "{% nosuchtag %}",         "{% include 'x' %}",
        "{{ 1 is }}",         "{% set x %}",             "{{ 'a' ~ }}",
        "{% call m %}{% endcall %}", "{{ x.1a }}",       "{{ @ }}",
    };
    for (size_t i = 0; i < IFD_ARRAY_LEN(BAD); i++) expect_parse_error(BAD[i]);
}

static void test_deep_nesting(void) {
    /* every kind of nesting is bounded: an error, never a stack overflow */
    size_t n = 20000;
    char *s = malloc(n * 16 + 64);
    char *p = s;
    p += sprintf(p, "{{ ");
    for (size_t i = 0; i < n; i++) *p++ = '(';
    *p++ = '1';
    for (size_t i = 0; i < n; i++) *p++ = ')';
    sprintf(p, " }}");
    expect_parse_error(s);
    p = s;
    p += sprintf(p, "{{ ");
    for (size_t i = 0; i < n; i++) p += sprintf(p, "not ");
    sprintf(p, "1 }}");
    expect_parse_error(s);
    p = s;
    p += sprintf(p, "{{ x");
    for (size_t i = 0; i < n; i++) p += sprintf(p, "|e");
    sprintf(p, " }}");
    char err[256], *out = NULL;
    size_t on;
    int rc = render(s, NULL, NULL, &out, &on, err, sizeof(err)); /* long filter chain: fine or a limit */
    CHECKF(rc == IFD_OK || rc == IFD_ERR_LIMIT || rc == IFD_ERR_TEMPLATE, "filter chain rc %d", rc);
    free(out);
    p = s;
    for (size_t i = 0; i < 2000; i++) p += sprintf(p, "{%% if true %%}");
    for (size_t i = 0; i < 2000; i++) p += sprintf(p, "{%% endif %%}");
    expect_parse_error(s);
    free(s);
    /* deeply nested context data */
    size_t depth = 900;
    char *j = malloc(depth * 2 + 8), *q = j;
    for (size_t i = 0; i < depth; i++) *q++ = '[';
    for (size_t i = 0; i < depth; i++) *q++ = ']';
    *q = 0;
    cJSON *arr = cJSON_Parse(j);
    if (arr) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddItemToObject(root, "d", arr);
        chat_template *t = NULL;
        const char *src = "{{ d|tojson|length }}{{ d|string|length }}{{ d == d }}";
        CHECK(chat_template_create(&t, src, strlen(src), err, sizeof(err)) == IFD_OK);
        rc = chat_template_render(t, root, NULL, &out, &on, err, sizeof(err));
        CHECKF(rc == IFD_OK || rc == IFD_ERR_LIMIT, "deep ctx rc %d: %s", rc, err);
        free(out);
        chat_template_destroy(t);
        cJSON_Delete(root);
    }
    free(j);
}

/* ---- API ---------------------------------------------------------------------------- */

static void test_api(void) {
    char err[256] = "", *out = NULL;
    size_t n = 99;
    chat_template *t = NULL;
    CHECK(chat_template_create(&t, NULL, 0, err, sizeof(err)) == IFD_OK);
    CHECK(chat_template_render(t, NULL, NULL, &out, &n, err, sizeof(err)) == IFD_OK);
    CHECK(out && n == 0 && out[0] == 0);
    free(out);
    chat_template_destroy(t);
    chat_template_destroy(NULL);

    /* source need not be NUL-terminated; output may hold NUL bytes */
    const char src[] = "{{ 'a\\x00b' }}XXXX";
    CHECK(chat_template_create(&t, src, sizeof(src) - 1 - 4, err, sizeof(err)) == IFD_OK);
    CHECK(chat_template_render(t, NULL, NULL, &out, &n, err, sizeof(err)) == IFD_OK);
    CHECK(n == 3 && !memcmp(out, "a\0b", 3));
    free(out);

    /* ctx must be an object */
    cJSON *arr = cJSON_CreateArray();
    CHECK(chat_template_render(t, arr, NULL, &out, &n, err, sizeof(err)) == IFD_ERR_INVALID && !out);
    cJSON_Delete(arr);
    chat_template_destroy(t);

    /* the pinned clock and the real one */
    const char *fmt = "{{ strftime_now('%Y-%m-%d %H:%M %a') }}";
    CHECK(chat_template_create(&t, fmt, strlen(fmt), err, sizeof(err)) == IFD_OK);
    chat_template_limits lim = {.fixed_now = "2026-11-29 12:00:00"};
    CHECK(chat_template_render(t, NULL, &lim, &out, &n, err, sizeof(err)) == IFD_OK);
    CHECKF(!strcmp(out, "2026-11-29 12:00 Sun"), "fixed: %s", out);
    free(out);
    CHECK(chat_template_render(t, NULL, NULL, &out, &n, err, sizeof(err)) == IFD_OK);
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char year[16];
    snprintf(year, sizeof(year), "%04d", tm.tm_year + 1900);
    CHECKF(n > 4 && !strncmp(out, year, 4), "real clock: %s", out);
    free(out);
    lim.fixed_now = "yesterday";
    CHECK(chat_template_render(t, NULL, &lim, &out, &n, err, sizeof(err)) == IFD_ERR_INVALID);
    chat_template_destroy(t);

    /* raise_exception's message is the whole error text */
    const char *rs = "{{ raise_exception('exact text: ' ~ 42) }}";
    CHECK(render(rs, NULL, NULL, &out, &n, err, sizeof(err)) == IFD_ERR_TEMPLATE);
    CHECKF(!strcmp(err, "exact text: 42"), "%s", err);
    /* a small error buffer truncates, never overflows */
    char tiny[8];
    CHECK(render(rs, NULL, NULL, &out, &n, tiny, sizeof(tiny)) == IFD_ERR_TEMPLATE && strlen(tiny) == 7);
}

/* ---- threads ------------------------------------------------------------------------ */

static const char *THREAD_TMPL =
    "{%- if tools %}{{ tools|tojson }}{% endif %}"
    "{%- set ns = namespace(n=0) %}"
    "{%- for m in messages %}{% set ns.n = ns.n + 1 %}<|{{ m.role }}|>{{ m.content|trim }}"
    "{%- if m.tool_calls %}{% for c in m.tool_calls %}{{ c.function.arguments|tojson }}{% endfor %}{% endif %}"
    "{%- endfor %}{{ ns.n }}{% if add_generation_prompt %}<|assistant|>{% endif %}";
static const char *THREAD_CTX =
    "{\"messages\": [{\"role\": \"user\", \"content\": \" hi \"}, {\"role\": \"assistant\", \"content\": \"\","
    " \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1, 2, \"é\"]}}}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], \"add_generation_prompt\": true}";

typedef struct thread_arg {
    const chat_template *t;
    const cJSON *ctx;
    const char *want;
    int failures;
} thread_arg;

static void *thread_main(void *p) {
    thread_arg *a = p;
    for (int i = 0; i < 200; i++) {
        char err[256], *out = NULL;
        size_t n;
        if (chat_template_render(a->t, a->ctx, NULL, &out, &n, err, sizeof(err)) != IFD_OK || strcmp(out, a->want))
            a->failures++;
        free(out);
    }
    return NULL;
}

static void test_threads(void) {
    chat_template *t = NULL;
    char err[256], *want = NULL;
    size_t n;
    CHECK(chat_template_create(&t, THREAD_TMPL, strlen(THREAD_TMPL), err, sizeof(err)) == IFD_OK);
    cJSON *ctx = cJSON_Parse(THREAD_CTX);
    CHECK(ctx != NULL);
    CHECK(chat_template_render(t, ctx, NULL, &want, &n, err, sizeof(err)) == IFD_OK);
    CHECKF(!strcmp(want, "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]<|user|>hi<|assistant|>"
                         "{\"a\": [1, 2, \"é\"]}2<|assistant|>"), "%s", want);
    enum { NT = 8 };
    pthread_t th[NT];
    thread_arg args[NT];
    for (int i = 0; i < NT; i++) {
        args[i] = (thread_arg){t, ctx, want, 0};
        pthread_create(&th[i], NULL, thread_main, &args[i]);
    }
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        CHECKF(args[i].failures == 0, "thread %d: %d failures", i, args[i].failures);
    }
    free(want);
    cJSON_Delete(ctx);
    chat_template_destroy(t);
}

/* ---- no-crash sweep over mutated templates ----------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void test_fuzz(void) {
    static const char *const TOKENS[] = {"{{", "}}", "{%", "%}", "{#", "#}", "-", "+", "(", ")", "[", "]",
                                         "{", "}", "|", ".", ",", ":", "'", "\"", "\\", " if ", " else ",
                                         " for ", " in ", " not ", " is ", " and ", "loop", "ns", "x",
                                         "messages", "1", "-1", "0", "*", "**", "/", "//", "%", "~", "\n",
                                         "\xc3", "\xff", "{% endfor %}", "{% endif %}", "caller()", "[::-1]",
                                         "|tojson", "|join", "|map('upper')", "range(9)", "namespace()"};
    const char *ctx_json =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": null,"
        " \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]}],"
        " \"x\": [1, \"a\", {\"b\": null}], \"add_generation_prompt\": true}";
    cJSON *ctx = cJSON_Parse(ctx_json);
    const char *env = getenv("INFERD_FUZZ_ITERS");
    long iters = env ? atol(env) : 3000;
    /* seeds: every template of the tables plus the thread template */
    const tcase *tables[] = {LOOPS, LOOPVARS, SCOPE, MACROS, SLICING, FILTERS, TESTS, WHITESPACE, STRINGS, TOJSON, OPERATORS, ERRORS};
    const size_t sizes[] = {IFD_ARRAY_LEN(LOOPS), IFD_ARRAY_LEN(LOOPVARS), IFD_ARRAY_LEN(SCOPE), IFD_ARRAY_LEN(MACROS),
                            IFD_ARRAY_LEN(SLICING), IFD_ARRAY_LEN(FILTERS), IFD_ARRAY_LEN(TESTS), IFD_ARRAY_LEN(WHITESPACE),
                            IFD_ARRAY_LEN(STRINGS), IFD_ARRAY_LEN(TOJSON), IFD_ARRAY_LEN(OPERATORS), IFD_ARRAY_LEN(ERRORS)};
    size_t nseeds = 1;
    for (size_t i = 0; i < IFD_ARRAY_LEN(sizes); i++) nseeds += sizes[i];
    const char **seeds = malloc(nseeds * sizeof(*seeds));
    size_t k = 0;
    for (size_t i = 0; i < IFD_ARRAY_LEN(sizes); i++)
        for (size_t j = 0; j < sizes[i]; j++) seeds[k++] = tables[i][j].tmpl;
    seeds[k++] = THREAD_TMPL;
    chat_template_limits lim = {.max_steps = 200000, .max_seconds = 0.5, .max_output_bytes = 1 << 16,
                                .max_memory_bytes = 32 << 20, .fixed_now = FIXED_NOW};
    long ok = 0, parse_err = 0, render_err = 0;
    char *buf = malloc(1 << 16);
    for (long it = 0; it < iters; it++) {
        const char *seed = seeds[rng() % nseeds];
        size_t n = strlen(seed);
        if (n > 4000) n = 4000;
        memcpy(buf, seed, n);
        int muts = 1 + (int)(rng() % 4);
        for (int m = 0; m < muts; m++) {
            size_t pos = n ? rng() % (n + 1) : 0;
            switch (rng() % 4) {
            case 0: /* insert a token */ {
                const char *tok = TOKENS[rng() % IFD_ARRAY_LEN(TOKENS)];
                size_t tl = strlen(tok);
                if (n + tl < 8000) {
                    memmove(buf + pos + tl, buf + pos, n - pos);
                    memcpy(buf + pos, tok, tl);
                    n += tl;
                }
                break;
            }
            case 1: /* delete a span */ {
                size_t len = 1 + rng() % 8;
                if (pos + len <= n) {
                    memmove(buf + pos, buf + pos + len, n - pos - len);
                    n -= len;
                }
                break;
            }
            case 2: /* flip a byte */
                if (pos < n) buf[pos] = (char)rng();
                break;
            default: /* truncate */
                n = pos;
            }
        }
        chat_template *t = NULL;
        char err[256], *out = NULL;
        size_t on;
        if (chat_template_create(&t, buf, n, err, sizeof(err)) != IFD_OK) {
            parse_err++;
            continue;
        }
        int rc = chat_template_render(t, ctx, &lim, &out, &on, err, sizeof(err));
        CHECKF(rc == IFD_OK || rc == IFD_ERR_TEMPLATE || rc == IFD_ERR_LIMIT, "fuzz rc %d: %s", rc, err);
        if (rc == IFD_OK) ok++;
        else render_err++;
        free(out);
        chat_template_destroy(t);
    }
    printf("  fuzz: %ld iterations, %ld rendered, %ld parse errors, %ld render errors\n", iters, ok, parse_err,
           render_err);
    free(buf);
    free(seeds);
    cJSON_Delete(ctx);
}

TEST_MAIN(T(test_loops), T(test_loopvars), T(test_scope), T(test_macros), T(test_slicing), T(test_filters),
          T(test_tests), T(test_whitespace), T(test_strings), T(test_tojson), T(test_operators), T(test_errors),
          T(test_limit_steps), T(test_limit_time), T(test_limit_output), T(test_limit_memory),
          T(test_limit_recursion), T(test_parse_errors), T(test_deep_nesting), T(test_api), T(test_threads),
          T(test_fuzz))
