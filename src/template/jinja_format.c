/* jinja_format.c — Python string formatting for templates: printf-style `fmt % args`
 * (also the `format` filter) and str.format with the format-spec mini-language
 * (fill, align, sign, #, 0, width, grouping, precision, type).
 *
 * Not supported: nested replacement fields inside a format spec ("{:{w}}"), the 'n'
 * locale type beyond plain digits. Runs on the rendering thread. */
#include "jinja.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void put_padded(jr *r, jbuf *b, jv s, int64_t width, bool left, uint32_t fill) {
    int64_t len = (int64_t)ju_len(s.s, s.n);
    int64_t padn = width > len ? width - len : 0;
    if (padn > (int64_t)r->max_out) jr_fail(r, IFD_ERR_LIMIT, "string exceeds the output limit");
    char enc[4];
    size_t el = ju_encode(fill, enc);
    if (!left)
        for (int64_t i = 0; i < padn; i++) jbuf_put(r, b, enc, el);
    jbuf_put(r, b, s.s, s.n);
    if (left)
        for (int64_t i = 0; i < padn; i++) jbuf_put(r, b, enc, el);
}

static jv trunc_cp(jv s, int64_t prec) {
    if (prec < 0) return s;
    size_t off = ju_offset(s.s, s.n, (size_t)prec);
    return jv_str(s.s, off);
}

/* ---- printf-style --------------------------------------------------------------------- */

jv ju_percent_format(jr *r, jv fmt, jv args) {
    const jv *argv;
    size_t argc, ai = 0;
    bool mapping = false;
    if (args.t == JV_LIST && args.l->tuple) {
        argv = args.l->v;
        argc = args.l->n;
    } else {
        /* Python skips the "not all converted" check for anything with __getitem__ */
        mapping = args.t == JV_DICT || args.t == JV_LIST || args.t == JV_UNDEF;
        argv = &args;
        argc = 1;
    }
    jbuf b = {0};
    size_t i = 0, n = fmt.n;
    const char *s = fmt.s;
    while (i < n) {
        if (s[i] != '%') {
            const char *pct = memchr(s + i, '%', n - i);
            size_t e = pct ? (size_t)(pct - s) : n;
            jbuf_put(r, &b, s + i, e - i);
            i = e;
            continue;
        }
        i++;
        if (i >= n) jr_type_error(r, "incomplete format");
        jv val = jv_missing();
        bool have_key = false;
        if (s[i] == '(') {
            if (args.t != JV_DICT) jr_type_error(r, "format requires a mapping");
            int depth = 1;
            size_t ks = ++i;
            while (i < n && depth) {
                if (s[i] == '(') depth++;
                else if (s[i] == ')') depth--;
                i++;
            }
            if (depth) jr_type_error(r, "incomplete format key");
            jv key = jv_str(s + ks, i - 1 - ks);
            if (!jv_dict_get(r, args.d, key, &val)) {
                jbuf kb = {0};
                jv_repr(r, &kb, key);
                jbuf_put(r, &kb, "", 1);
                jr_type_error(r, "%s", kb.p);
            }
            have_key = true;
        }
        char flags[8];
        size_t nf = 0;
        bool left = false, zero = false, alt = false, plus = false, space = false;
        while (i < n && strchr("-+ #0", s[i]) && s[i]) {
            if (s[i] == '-') left = true;
            if (s[i] == '+') plus = true;
            if (s[i] == ' ') space = true;
            if (s[i] == '#') alt = true;
            if (s[i] == '0') zero = true;
            if (nf < sizeof(flags) - 1) flags[nf++] = s[i];
            i++;
        }
        flags[nf] = 0;
        int64_t width = -1, prec = -1;
        if (i < n && s[i] == '*') {
            if (ai >= argc) jr_type_error(r, "not enough arguments for format string");
            jv w = argv[ai++];
            if (w.t != JV_INT) jr_type_error(r, "* wants int");
            width = w.i;
            if (width < 0) left = true, width = -width;
            i++;
        } else {
            while (i < n && s[i] >= '0' && s[i] <= '9') width = (width < 0 ? 0 : width) * 10 + (s[i++] - '0'), width = IFD_MIN(width, 1 << 20);
        }
        if (i < n && s[i] == '.') {
            i++;
            prec = 0;
            if (i < n && s[i] == '*') {
                if (ai >= argc) jr_type_error(r, "not enough arguments for format string");
                jv pv = argv[ai++];
                if (pv.t != JV_INT) jr_type_error(r, "* wants int");
                prec = pv.i < 0 ? 0 : pv.i;
                i++;
            } else {
                while (i < n && s[i] >= '0' && s[i] <= '9') prec = prec * 10 + (s[i++] - '0'), prec = IFD_MIN(prec, 1 << 20);
            }
        }
        while (i < n && (s[i] == 'h' || s[i] == 'l' || s[i] == 'L')) i++;
        if (i >= n) jr_type_error(r, "incomplete format");
        char conv = s[i++];
        if (conv == '%') {
            jbuf_put(r, &b, "%", 1);
            continue;
        }
        if (!have_key) {
            if (ai >= argc) jr_type_error(r, "not enough arguments for format string");
            val = argv[ai++];
        }
        if (val.t == JV_UNDEF && strchr("sra", conv) == NULL) je_undefined_fail(r, val);
        char cfmt[48], out[512];
        switch (conv) {
        case 's':
        case 'r':
        case 'a': {
            jv sv;
            if (conv == 's') {
                sv = jv_as_str(r, val);
            } else {
                jbuf rb = {0};
                jv_repr(r, &rb, val);
                sv = jb_take(r, &rb);
            }
            put_padded(r, &b, trunc_cp(sv, prec), width, left, ' ');
            break;
        }
        case 'd':
        case 'i':
        case 'u':
        case 'o':
        case 'x':
        case 'X': {
            int64_t iv;
            if (val.t == JV_INT) iv = val.i;
            else if (val.t == JV_BOOL) iv = val.b;
            else if (val.t == JV_FLOAT && (conv == 'd' || conv == 'i' || conv == 'u')) {
                if (!isfinite(val.f)) jr_type_error(r, "cannot convert float %s to integer", isnan(val.f) ? "NaN" : "infinity");
                if (fabs(val.f) >= 9.2e18) { /* beyond int64: Python prints the exact integer */
                    jbuf big = {0};
                    jb_printf(r, &big, "%.0f", trunc(val.f));
                    put_padded(r, &b, jb_take(r, &big), width, left, ' ');
                    break;
                }
                iv = (int64_t)val.f;
            } else if (conv == 'd' || conv == 'i' || conv == 'u') {
                jr_type_error(r, "%%%c format: a real number is required, not %s", conv, jv_type_name(val));
            } else {
                jr_type_error(r, "%%%c format: an integer is required, not %s", conv, jv_type_name(val));
            }
            char c = conv == 'i' || conv == 'u' ? 'd' : conv;
            if (conv == 'o' && alt) {
                /* Python writes 0o17, C writes 017 */
                char digits[64];
                snprintf(digits, sizeof(digits), "%llo", (unsigned long long)(iv < 0 ? -(uint64_t)iv : (uint64_t)iv));
                snprintf(out, sizeof(out), "%s0o%s", iv < 0 ? "-" : plus ? "+" : space ? " " : "", digits);
                put_padded(r, &b, jv_cstr(out), width, left, ' ');
                break;
            }
            if (conv == 'o' || conv == 'x' || conv == 'X') {
                uint64_t mag = iv < 0 ? -(uint64_t)iv : (uint64_t)iv;
                char f2[24];
                snprintf(f2, sizeof(f2), "%%%s%s%sll%c", alt ? "#" : "", zero && !left ? "0" : "",
                         width > 0 ? "*" : "", c);
                char digits[80];
                const char *sign = iv < 0 ? "-" : plus ? "+" : space ? " " : "";
                if (width > 0) {
                    int w = (int)IFD_MIN(width - (int64_t)strlen(sign), 400);
                    snprintf(digits, sizeof(digits), f2, w < 0 ? 0 : w, (unsigned long long)mag);
                } else {
                    snprintf(digits, sizeof(digits), f2, (unsigned long long)mag);
                }
                snprintf(out, sizeof(out), "%s%s", sign, digits);
                put_padded(r, &b, jv_cstr(out), width, left, ' ');
                break;
            }
            snprintf(cfmt, sizeof(cfmt), "%%%s%s%s%s", flags, width >= 0 ? "*" : "", prec >= 0 ? ".*" : "", "lld");
            int w = (int)IFD_MIN(width, 400), pr = (int)IFD_MIN(prec, 400);
            if (width >= 0 && prec >= 0) snprintf(out, sizeof(out), cfmt, w, pr, (long long)iv);
            else if (width >= 0) snprintf(out, sizeof(out), cfmt, w, (long long)iv);
            else if (prec >= 0) snprintf(out, sizeof(out), cfmt, pr, (long long)iv);
            else snprintf(out, sizeof(out), cfmt, (long long)iv);
            jb_puts(r, &b, out);
            break;
        }
        case 'e':
        case 'E':
        case 'f':
        case 'F':
        case 'g':
        case 'G': {
            if (!jv_is_num(val)) jr_type_error(r, "must be real number, not %s", jv_type_name(val));
            double d = jv_as_double(val);
            snprintf(cfmt, sizeof(cfmt), "%%%s%s.*%c", flags, width >= 0 ? "*" : "", conv);
            int w = (int)IFD_MIN(width, 400), pr = (int)IFD_MIN(prec < 0 ? 6 : prec, 300);
            if (width >= 0) jb_printf(r, &b, cfmt, w, pr, d); /* any length: 1e308 has 309 digits */
            else jb_printf(r, &b, cfmt, pr, d);
            break;
        }
        case 'c': {
            char enc[4];
            jv cv;
            if (val.t == JV_INT) {
                if (val.i < 0 || val.i > 0x10FFFF) jr_type_error(r, "%%c arg not in range(0x110000)");
                cv = jv_str(enc, ju_encode((uint32_t)val.i, enc));
            } else if (val.t == JV_STR && ju_len(val.s, val.n) == 1) {
                cv = val;
            } else {
                jr_type_error(r, "%%c requires int or char");
            }
            put_padded(r, &b, cv, width, left, ' ');
            break;
        }
        default:
            jr_type_error(r, "unsupported format character '%c' (0x%x) at index %zu", conv, (unsigned char)conv, i - 1);
        }
    }
    if (ai < argc && !mapping) jr_type_error(r, "not all arguments converted during string formatting");
    return jb_take(r, &b);
}

/* ---- str.format ------------------------------------------------------------------------- */

typedef struct fspec {
    uint32_t fill;
    char align, sign, type, grouping;
    bool alt, zero;
    int64_t width, prec;
} fspec;

static void parse_spec(jr *r, jv spec, fspec *f) {
    memset(f, 0, sizeof(*f));
    f->fill = ' ';
    f->width = -1;
    f->prec = -1;
    const char *s = spec.s;
    size_t n = spec.n, i = 0;
    if (n) {
        size_t adv;
        uint32_t cp = ju_decode(s, n, &adv);
        if (adv < n && strchr("<>=^", s[adv])) {
            f->fill = cp;
            f->align = s[adv];
            i = adv + 1;
        } else if (strchr("<>=^", s[0])) {
            f->align = s[0];
            i = 1;
        }
    }
    if (i < n && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) f->sign = s[i++];
    if (i < n && s[i] == 'z') i++;
    if (i < n && s[i] == '#') f->alt = true, i++;
    if (i < n && s[i] == '0') {
        f->zero = true;
        i++;
    }
    while (i < n && s[i] >= '0' && s[i] <= '9') f->width = (f->width < 0 ? 0 : f->width) * 10 + (s[i++] - '0'), f->width = IFD_MIN(f->width, 1 << 20);
    if (i < n && (s[i] == ',' || s[i] == '_')) f->grouping = s[i++];
    if (i < n && s[i] == '.') {
        i++;
        f->prec = 0;
        if (i >= n || s[i] < '0' || s[i] > '9') jr_type_error(r, "Format specifier missing precision");
        while (i < n && s[i] >= '0' && s[i] <= '9') f->prec = f->prec * 10 + (s[i++] - '0'), f->prec = IFD_MIN(f->prec, 400);
    }
    if (i < n) f->type = s[i++];
    if (i < n) jr_type_error(r, "Invalid format specifier");
    if (f->zero && !f->align) {
        f->fill = '0';
        f->align = '=';
    }
}

static void group_digits(char *digits, size_t cap, char sep) {
    size_t len = strlen(digits), intlen = 0;
    while (intlen < len && digits[intlen] >= '0' && digits[intlen] <= '9') intlen++;
    if (intlen <= 3 || !sep) return;
    char tmp[512];
    size_t k = 0;
    for (size_t i = 0; i < intlen && k + 2 < sizeof(tmp); i++) {
        if (i && (intlen - i) % 3 == 0) tmp[k++] = sep;
        tmp[k++] = digits[i];
    }
    for (size_t i = intlen; i < len && k + 1 < sizeof(tmp); i++) tmp[k++] = digits[i];
    tmp[k] = 0;
    snprintf(digits, cap, "%s", tmp);
}

/* body: digits without sign; writes sign + body with fill/align/width */
static void emit_aligned(jr *r, jbuf *b, const char *sign, jv body, const fspec *f, char dflt_align) {
    char align = f->align ? f->align : dflt_align;
    int64_t len = (int64_t)(strlen(sign) + ju_len(body.s, body.n));
    int64_t padn = f->width > len ? f->width - len : 0;
    if (padn > (int64_t)r->max_out) jr_fail(r, IFD_ERR_LIMIT, "string exceeds the output limit");
    char enc[4];
    size_t el = ju_encode(f->fill, enc);
    int64_t lp = align == '<' ? 0 : align == '^' ? padn / 2 : padn;
    if (align == '=') {
        jb_puts(r, b, sign);
        for (int64_t i = 0; i < padn; i++) jbuf_put(r, b, enc, el);
        jbuf_put(r, b, body.s, body.n);
        return;
    }
    for (int64_t i = 0; i < lp; i++) jbuf_put(r, b, enc, el);
    jb_puts(r, b, sign);
    jbuf_put(r, b, body.s, body.n);
    for (int64_t i = 0; i < padn - lp; i++) jbuf_put(r, b, enc, el);
}

static void format_value(jr *r, jbuf *b, jv v, jv spec) {
    if (v.t == JV_UNDEF && spec.n == 0) return;
    if (v.t == JV_UNDEF) je_undefined_fail(r, v);
    if (spec.n == 0) {
        jv_to_str(r, b, v);
        return;
    }
    fspec f;
    parse_spec(r, spec, &f);
    char body[1024]; /* a float with %.400f: 309 digits + '.' + 400 + sign/suffix */
    if (v.t == JV_STR) {
        if (f.type && f.type != 's') jr_type_error(r, "Unknown format code '%c' for object of type 'str'", f.type);
        if (f.sign) jr_type_error(r, "Sign not allowed in string format specifier");
        emit_aligned(r, b, "", trunc_cp(v, f.prec), &f, '<');
        return;
    }
    if (v.t == JV_INT || v.t == JV_BOOL) {
        int64_t iv = v.t == JV_BOOL ? v.b : v.i;
        char t = f.type ? f.type : 'd';
        if (strchr("eEfFgG%", t)) {
            v = jv_float((double)iv);
        } else {
            uint64_t mag = iv < 0 ? -(uint64_t)iv : (uint64_t)iv;
            const char *sign = iv < 0 ? "-" : f.sign == '+' ? "+" : f.sign == ' ' ? " " : "";
            switch (t) {
            case 'd':
            case 'n': snprintf(body, sizeof(body), "%llu", (unsigned long long)mag); break;
            case 'x': snprintf(body, sizeof(body), f.alt ? "0x%llx" : "%llx", (unsigned long long)mag); break;
            case 'X': snprintf(body, sizeof(body), f.alt ? "0X%llX" : "%llX", (unsigned long long)mag); break;
            case 'o': snprintf(body, sizeof(body), f.alt ? "0o%llo" : "%llo", (unsigned long long)mag); break;
            case 'b': {
                size_t k = 0;
                if (f.alt) body[k++] = '0', body[k++] = 'b';
                int top = 63;
                while (top > 0 && !((mag >> top) & 1)) top--;
                for (int i = top; i >= 0; i--) body[k++] = (char)('0' + ((mag >> i) & 1));
                body[k] = 0;
                break;
            }
            case 'c': {
                if (iv < 0 || iv > 0x10FFFF) jr_type_error(r, "%%c arg not in range(0x110000)");
                char enc[4];
                size_t el = ju_encode((uint32_t)iv, enc);
                memcpy(body, enc, el);
                body[el] = 0;
                sign = "";
                break;
            }
            default: jr_type_error(r, "Unknown format code '%c' for object of type 'int'", t);
            }
            if (f.grouping && t != 'c') group_digits(body, sizeof(body), f.grouping);
            emit_aligned(r, b, sign, jv_cstr(body), &f, '>');
            return;
        }
    }
    if (v.t == JV_FLOAT) {
        double d = v.f;
        char t = f.type;
        const char *sign = signbit(d) ? "-" : f.sign == '+' ? "+" : f.sign == ' ' ? " " : "";
        double mag = fabs(d);
        int pr = (int)(f.prec >= 0 ? f.prec : 6);
        if (!t && f.prec < 0) {
            jv_fmt_float(body, sizeof(body), mag);
        } else if (!t) {
            snprintf(body, sizeof(body), f.alt ? "%#.*g" : "%.*g", f.prec == 0 ? 1 : pr, mag);
            if (isfinite(mag) && !strchr(body, '.') && !strchr(body, 'e')) strcat(body, ".0");
        } else if (t == '%') {
            snprintf(body, sizeof(body), f.alt ? "%#.*f%%" : "%.*f%%", pr, mag * 100);
        } else if (strchr("eEfFgG", t)) {
            char cf[16];
            snprintf(cf, sizeof(cf), "%%%s.*%c", f.alt ? "#" : "", t);
            snprintf(body, sizeof(body), cf, pr, mag);
        } else if (t == 'n') {
            snprintf(body, sizeof(body), "%.*g", pr, mag);
        } else {
            jr_type_error(r, "Unknown format code '%c' for object of type 'float'", t);
        }
        if (f.grouping) group_digits(body, sizeof(body), f.grouping);
        emit_aligned(r, b, sign, jv_cstr(body), &f, '>');
        return;
    }
    jr_type_error(r, "unsupported format string passed to %s.__format__", jv_type_name(v));
}

jv ju_str_format(jr *r, jv fmt, const jv *args, size_t nargs, const char *const *kwn,
                 const jv *kwv, size_t nkw) {
    jbuf b = {0};
    const char *s = fmt.s;
    size_t n = fmt.n, i = 0, auto_idx = 0;
    int mode = 0; /* 1 automatic, 2 manual numbering */
    while (i < n) {
        char c = s[i];
        if (c == '}') {
            if (i + 1 < n && s[i + 1] == '}') {
                jbuf_put(r, &b, "}", 1);
                i += 2;
                continue;
            }
            jr_type_error(r, "Single '}' encountered in format string");
        }
        if (c != '{') {
            size_t e = i;
            while (e < n && s[e] != '{' && s[e] != '}') e++;
            jbuf_put(r, &b, s + i, e - i);
            i = e;
            continue;
        }
        if (i + 1 < n && s[i + 1] == '{') {
            jbuf_put(r, &b, "{", 1);
            i += 2;
            continue;
        }
        size_t fs = ++i;
        int depth = 1;
        while (i < n && depth) {
            if (s[i] == '{') depth++;
            else if (s[i] == '}') depth--;
            if (depth) i++;
        }
        if (depth) jr_type_error(r, "expected '}' before end of string");
        jv field = jv_str(s + fs, i - fs);
        i++;
        if (memchr(field.s, '{', field.n)) jr_fail(r, IFD_ERR_TEMPLATE, "nested format fields are not supported");
        /* split name / conversion / spec */
        size_t k = 0;
        while (k < field.n && field.s[k] != '!' && field.s[k] != ':') k++;
        jv name = jv_str(field.s, k);
        char conv = 0;
        jv spec = jv_str("", 0);
        if (k < field.n && field.s[k] == '!') {
            if (k + 1 >= field.n) jr_type_error(r, "end of string while looking for conversion specifier");
            conv = field.s[k + 1];
            k += 2;
            if (k < field.n && field.s[k] != ':') jr_type_error(r, "expected ':' after conversion specifier");
        }
        if (k < field.n && field.s[k] == ':') spec = jv_str(field.s + k + 1, field.n - k - 1);
        /* first part of the name */
        size_t e = 0;
        while (e < name.n && name.s[e] != '.' && name.s[e] != '[') e++;
        jv head = jv_str(name.s, e);
        jv val;
        bool numeric = head.n > 0;
        int64_t idx = 0;
        for (size_t q = 0; q < head.n; q++) {
            if (head.s[q] < '0' || head.s[q] > '9') {
                numeric = false;
                break;
            }
            idx = idx * 10 + (head.s[q] - '0');
            if (idx > 1000000) idx = 1000000;
        }
        if (head.n == 0) {
            if (mode == 2) jr_type_error(r, "cannot switch from manual field specification to automatic field numbering");
            mode = 1;
            idx = (int64_t)auto_idx++;
            numeric = true;
        } else if (numeric) {
            if (mode == 1) jr_type_error(r, "cannot switch from automatic field numbering to manual field specification");
            mode = 2;
        }
        if (numeric) {
            if ((size_t)idx >= nargs)
                jr_type_error(r, "tuple index out of range");
            val = args[idx];
        } else {
            size_t q;
            for (q = 0; q < nkw; q++)
                if (strlen(kwn[q]) == head.n && !memcmp(kwn[q], head.s, head.n)) break;
            if (q == nkw) {
                jbuf kb = {0};
                jv_repr(r, &kb, head);
                jbuf_put(r, &kb, "", 1);
                jr_type_error(r, "%s", kb.p);
            }
            val = kwv[q];
        }
        /* .attr and [key] accessors */
        while (e < name.n) {
            if (name.s[e] == '.') {
                size_t q = ++e;
                while (e < name.n && name.s[e] != '.' && name.s[e] != '[') e++;
                val = je_getattr(r, val, ja_strndup(&r->arena, name.s + q, e - q));
            } else {
                size_t q = ++e;
                while (e < name.n && name.s[e] != ']') e++;
                if (e >= name.n) jr_type_error(r, "Missing ']' in format string");
                jv key = jv_str(name.s + q, e - q);
                bool dig = key.n > 0;
                int64_t kv = 0;
                for (size_t z = 0; z < key.n; z++) {
                    if (key.s[z] < '0' || key.s[z] > '9') {
                        dig = false;
                        break;
                    }
                    if (kv > 100000000) {
                        dig = false;
                        break;
                    }
                    kv = kv * 10 + (key.s[z] - '0');
                }
                val = je_getitem(r, val, dig ? jv_int(kv) : key);
                e++;
            }
        }
        if (conv == 'r' || conv == 'a') {
            jbuf rb = {0};
            jv_repr(r, &rb, val);
            val = jb_take(r, &rb);
        } else if (conv == 's') {
            val = jv_as_str(r, val);
        } else if (conv) {
            jr_type_error(r, "Unknown conversion specifier %c", conv);
        }
        format_value(r, &b, val, spec);
    }
    return jb_take(r, &b);
}
