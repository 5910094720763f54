/*
 * c-deploy: the deploy tool (examples/deploy) written in C against the
 * sandflow guest ABI (abi/README.md) with nothing but wasi-libc.
 *
 * Plan the deploy in the step "planDeploy", ask a person to confirm it,
 * and apply it in the step "applyDeploy" once approved. The result is
 * {"deployed":true,"url":...} or {"deployed":false,"reason":"rejected"}.
 *
 * Build: ./build.sh (clang-14 --target=wasm32-wasi -mexec-model=reactor).
 *
 * Awaiting: this guest uses the ABI's *blocking* await (the 0x100 flag).
 * With the returning await, an unsettled future makes sandflow_run return 1
 * and the next activation calls sandflow_run again on the same instance,
 * where the body must carry on from the await it stopped at. A Go or JS
 * guest keeps its stack in a goroutine or a promise; plain C has neither
 * (no threads, no coroutines, and wasi-libc has no setjmp/longjmp here), so
 * it would have to be written as a hand-made state machine. With the
 * blocking await the body is straight-line code: an await that cannot be
 * satisfied never returns, the host ends the instance, and the next
 * activation replays the body from the top in a fresh instance, every op
 * answered from the log. The price is one replay per activation, which for
 * a four-op body is nothing. For the same reason the await flag on ops
 * (0x40000000) is not used: it waits like the returning await.
 *
 * Memory: every export call allocates from an arena freed at its start, so
 * a step instance reused for many steps does not grow.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the ABI ---------------------------------------------------------- */

#define SF_IMPORT(n) __attribute__((import_module("sandflow"), import_name(n)))
#define SF_EXPORT(n) __attribute__((export_name(n)))

SF_IMPORT("op")
int32_t sf_op(int32_t kind, const void *name, int32_t name_len,
              const void *payload, int32_t payload_len,
              void *resp, int32_t resp_cap);
SF_IMPORT("read")
int32_t sf_read(void *ptr, int32_t len);

enum {
	OP_INPUT = 1, OP_COMPLETE = 3, OP_STEP = 5, OP_ASK = 7, OP_AWAIT = 11,
	OP_STEP_INPUT = 12, OP_STEP_COMPLETE = 13,
};
enum {
	ST_OK = 0, ST_PENDING = 1, ST_REJECTED = 2, ST_SUSPEND = 3,
};
#define AWAIT_ALL 0u
#define AWAIT_BLOCK 0x100u

/* ---- arena ------------------------------------------------------------ */

typedef struct chunk { struct chunk *next; size_t used, cap; } chunk;
static chunk *arena;

static void die(const char *msg);

static void *alloc(size_t n) {
	n = (n + 7) & ~(size_t)7;
	if (!arena || arena->cap - arena->used < n) {
		size_t cap = n > 60000 ? n : 60000;
		chunk *c = malloc(sizeof(chunk) + cap);
		if (!c) die("out of memory");
		c->next = arena, c->used = 0, c->cap = cap;
		arena = c;
	}
	void *p = (char *)(arena + 1) + arena->used;
	arena->used += n;
	return p;
}

static void arena_reset(void) {
	while (arena) {
		chunk *next = arena->next;
		free(arena);
		arena = next;
	}
}

/* ---- output ----------------------------------------------------------- */

static void write_all(int fd, const char *s, size_t n) {
	while (n > 0) {
		ssize_t w = write(fd, s, n);
		if (w <= 0) return;
		s += w, n -= (size_t)w;
	}
}

/* die reports a broken contract on stderr and traps: the run (or the step
 * attempt) fails with a TrapError. */
static void die(const char *msg) {
	write_all(2, "c-deploy: ", 10);
	write_all(2, msg, strlen(msg));
	write_all(2, "\n", 1);
	__builtin_trap();
}

/* ---- a growing byte buffer -------------------------------------------- */

typedef struct { char *p; size_t n, cap; } buf;

static void put(buf *b, const void *s, size_t n) {
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 256;
		while (cap < b->n + n) cap *= 2;
		char *p = alloc(cap);
		if (b->n) memcpy(p, b->p, b->n);
		b->p = p, b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
}
static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }
static void putc_(buf *b, char c) { put(b, &c, 1); }
static void put_u32(buf *b, uint32_t v) {
	unsigned char le[4] = {v, v >> 8, v >> 16, v >> 24};
	put(b, le, 4);
}
static void put_int(buf *b, long v) {
	char d[24];
	int i = sizeof d;
	unsigned long u = v < 0 ? -(unsigned long)v : (unsigned long)v;
	do d[--i] = '0' + u % 10; while (u /= 10);
	if (v < 0) d[--i] = '-';
	put(b, d + i, sizeof d - i);
}

/* put_jstr writes s as a JSON string. s is UTF-8; only '"', '\\' and
 * control characters are escaped. */
static void put_jstr(buf *b, const char *s, size_t n) {
	static const char hex[] = "0123456789abcdef";
	putc_(b, '"');
	for (size_t i = 0; i < n; i++) {
		unsigned char c = s[i];
		if (c == '"' || c == '\\') putc_(b, '\\'), putc_(b, c);
		else if (c == '\n') puts_(b, "\\n");
		else if (c == '\r') puts_(b, "\\r");
		else if (c == '\t') puts_(b, "\\t");
		else if (c < 0x20) {
			char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
			put(b, e, 6);
		} else putc_(b, c);
	}
	putc_(b, '"');
}

/* ---- a small JSON reader ---------------------------------------------- */

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;

typedef struct jval {
	jtype t;
	const char *raw;     /* the value's JSON text, as it came */
	size_t rawlen;
	const char *s;       /* J_STR: decoded UTF-8; J_BOOL: "t" or "f" */
	size_t n;
	struct jval *kids;   /* J_ARR, J_OBJ: first element or member */
	struct jval *next;   /* next element or member */
	const char *key;     /* a member's decoded key */
	size_t keylen;
} jval;

typedef struct { const char *p, *end; int depth; } jparser;

static void skip_ws(jparser *j) {
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int hex4(const char *p, uint32_t *out) {
	uint32_t v = 0;
	for (int i = 0; i < 4; i++) {
		char c = p[i];
		v <<= 4;
		if (c >= '0' && c <= '9') v |= c - '0';
		else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
		else return 0;
	}
	*out = v;
	return 1;
}

static void put_utf8(buf *b, uint32_t r) {
	char u[4];
	if (r < 0x80) u[0] = r, put(b, u, 1);
	else if (r < 0x800) u[0] = 0xc0 | r >> 6, u[1] = 0x80 | (r & 63), put(b, u, 2);
	else if (r < 0x10000) u[0] = 0xe0 | r >> 12, u[1] = 0x80 | (r >> 6 & 63), u[2] = 0x80 | (r & 63), put(b, u, 3);
	else u[0] = 0xf0 | r >> 18, u[1] = 0x80 | (r >> 12 & 63), u[2] = 0x80 | (r >> 6 & 63), u[3] = 0x80 | (r & 63), put(b, u, 4);
}

/* parse_str reads a JSON string at j->p (after the quote is checked) and
 * decodes it; lone surrogates become U+FFFD, as in Go. */
static int parse_str(jparser *j, const char **s, size_t *n) {
	buf b = {0};
	j->p++; /* opening quote */
	while (j->p < j->end && *j->p != '"') {
		unsigned char c = *j->p;
		if (c < 0x20) return 0;
		if (c != '\\') { putc_(&b, c); j->p++; continue; }
		if (j->end - j->p < 2) return 0;
		char e = j->p[1];
		j->p += 2;
		switch (e) {
		case '"': case '\\': case '/': putc_(&b, e); break;
		case 'b': putc_(&b, '\b'); break;
		case 'f': putc_(&b, '\f'); break;
		case 'n': putc_(&b, '\n'); break;
		case 'r': putc_(&b, '\r'); break;
		case 't': putc_(&b, '\t'); break;
		case 'u': {
			uint32_t r, lo;
			if (j->end - j->p < 4 || !hex4(j->p, &r)) return 0;
			j->p += 4;
			if (r >= 0xd800 && r < 0xdc00 && j->end - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u' &&
			    hex4(j->p + 2, &lo) && lo >= 0xdc00 && lo < 0xe000) {
				r = 0x10000 + ((r - 0xd800) << 10) + (lo - 0xdc00);
				j->p += 6;
			} else if (r >= 0xd800 && r < 0xe000) {
				r = 0xfffd;
			}
			put_utf8(&b, r);
			break;
		}
		default: return 0;
		}
	}
	if (j->p >= j->end) return 0;
	j->p++; /* closing quote */
	putc_(&b, 0); /* NUL-terminated for convenience; n excludes it */
	*s = b.p, *n = b.n - 1;
	return 1;
}

static jval *parse_value(jparser *j) {
	skip_ws(j);
	if (j->p >= j->end || ++j->depth > 64) return NULL;
	jval *v = alloc(sizeof *v);
	memset(v, 0, sizeof *v);
	v->raw = j->p;
	char c = *j->p;
	if (c == '{' || c == '[') {
		char close = c == '{' ? '}' : ']';
		v->t = c == '{' ? J_OBJ : J_ARR;
		j->p++;
		jval **tail = &v->kids;
		skip_ws(j);
		if (j->p < j->end && *j->p == close) {
			j->p++;
		} else for (;;) {
			const char *key = NULL;
			size_t keylen = 0;
			if (v->t == J_OBJ) {
				skip_ws(j);
				if (j->p >= j->end || *j->p != '"' || !parse_str(j, &key, &keylen)) return NULL;
				skip_ws(j);
				if (j->p >= j->end || *j->p++ != ':') return NULL;
			}
			jval *k = parse_value(j);
			if (!k) return NULL;
			k->key = key, k->keylen = keylen;
			*tail = k, tail = &k->next;
			v->n++;
			skip_ws(j);
			if (j->p >= j->end) return NULL;
			if (*j->p == ',') { j->p++; continue; }
			if (*j->p++ != close) return NULL;
			break;
		}
	} else if (c == '"') {
		v->t = J_STR;
		if (!parse_str(j, &v->s, &v->n)) return NULL;
	} else if (c == '-' || (c >= '0' && c <= '9')) {
		v->t = J_NUM;
		while (j->p < j->end && *j->p && strchr("+-.0123456789eE", *j->p)) j->p++;
	} else {
		static const char *const words[] = {"null", "true", "false"};
		int i = c == 'n' ? 0 : c == 't' ? 1 : 2;
		size_t wl = strlen(words[i]);
		if ((size_t)(j->end - j->p) < wl || memcmp(j->p, words[i], wl)) return NULL;
		v->t = i ? J_BOOL : J_NULL;
		v->s = i == 1 ? "t" : "f";
		j->p += wl;
	}
	v->rawlen = j->p - v->raw;
	j->depth--;
	return v;
}

static jval *parse_json(const char *s, size_t n) {
	jparser j = {s, s + n, 0};
	jval *v = parse_value(&j);
	skip_ws(&j);
	return v && j.p == j.end ? v : NULL;
}

/* get returns the member key of object o, or NULL. */
static jval *get(const jval *o, const char *key) {
	if (!o || o->t != J_OBJ) return NULL;
	size_t kl = strlen(key);
	for (jval *k = o->kids; k; k = k->next)
		if (k->keylen == kl && !memcmp(k->key, key, kl)) return k;
	return NULL;
}

static int is_str(const jval *v, const char *s) {
	return v && v->t == J_STR && v->n == strlen(s) && !memcmp(v->s, s, v->n);
}

/* ---- ops -------------------------------------------------------------- */

typedef struct {
	uint32_t status, future;
	const char *payload; /* in the arena: it outlives the next op */
	size_t len;
} resp;

static uint32_t le32(const char *p) {
	const unsigned char *u = (const unsigned char *)p;
	return u[0] | u[1] << 8 | u[2] << 16 | (uint32_t)u[3] << 24;
}

static resp op(uint32_t kind, const char *name, const buf *payload) {
	static char rbuf[16384];
	const char *nm = name ? name : "";
	int32_t n = sf_op((int32_t)kind, nm, (int32_t)strlen(nm),
	                  payload ? payload->p : "", payload ? (int32_t)payload->n : 0,
	                  rbuf, (int32_t)sizeof rbuf);
	if (n < 8) die("op answered fewer than 8 bytes");
	char *body = alloc((size_t)n);
	if ((size_t)n <= sizeof rbuf) memcpy(body, rbuf, (size_t)n);
	else if (sf_read(body, n) != n) die("read refused a held body");
	return (resp){le32(body), le32(body + 4), body + 8, (size_t)n - 8};
}

/* An outcome is a settled future: ok with a value, or not with an error
 * object. */
typedef struct { int ok; jval *v; } outcome;

static outcome failure(const char *type, const char *msg, long status, long kind) {
	buf b = {0};
	puts_(&b, "{\"type\":");
	put_jstr(&b, type, strlen(type));
	puts_(&b, ",\"message\":");
	buf m = {0};
	puts_(&m, msg);
	if (status >= 0) puts_(&m, ": status "), put_int(&m, status), puts_(&m, " to op "), put_int(&m, kind);
	put_jstr(&b, m.p, m.n);
	puts_(&b, "}");
	return (outcome){0, parse_json(b.p, b.n)};
}

/* refused turns a status this guest does not expect into an error for the
 * run: the host's error object when it sent one (bad_request, too_large,
 * failed, ...), otherwise one that names the status. */
static outcome refused(const resp *r, uint32_t kind) {
	jval *e = parse_json(r->payload, r->len);
	if (e && e->t == J_OBJ && get(e, "type")) return (outcome){0, e};
	return failure("Error", "unexpected answer", (long)r->status, (long)kind);
}

static outcome settled(const resp *r, uint32_t kind) {
	jval *v = parse_json(r->payload, r->len);
	if (!v) return failure("Error", "malformed JSON in answer", (long)r->status, (long)kind);
	return (outcome){r->status == ST_OK, v};
}

/* await blocks on one future; it returns only once the future settled. */
static outcome await(uint32_t future) {
	buf b = {0};
	put_u32(&b, AWAIT_ALL | AWAIT_BLOCK);
	put_u32(&b, future);
	resp r = op(OP_AWAIT, NULL, &b);
	if (r.status == ST_SUSPEND) die("a blocking await answered suspend");
	if (r.status != ST_OK) return refused(&r, OP_AWAIT);
	/* entries: future u32 | state u32 | len u32 | value */
	for (size_t off = 0; off + 12 <= r.len;) {
		uint32_t id = le32(r.payload + off), state = le32(r.payload + off + 4), n = le32(r.payload + off + 8);
		if (n > r.len - off - 12) break;
		if (id == future && (state == 1 || state == 2)) {
			jval *v = parse_json(r.payload + off + 12, n);
			if (!v) break;
			return (outcome){state == 1, v};
		}
		off += 12 + (size_t)n;
	}
	return failure("Error", "await answered without the future", -1, 0);
}

/* future issues an op that makes a future and waits for it. */
static outcome future(uint32_t kind, const char *name, const buf *payload) {
	resp r = op(kind, name, payload);
	switch (r.status) {
	case ST_OK: case ST_REJECTED: return settled(&r, kind);
	case ST_PENDING: return await(r.future);
	default: return refused(&r, kind);
	}
}

static outcome step(const char *name, const char *input, size_t n) {
	buf b = {0};
	puts_(&b, "{\"input\":");
	put(&b, input, n);
	puts_(&b, "}");
	return future(OP_STEP, name, &b);
}

/* complete ends the body with {"result": v} or {"error": e}; sandflow_run
 * returns its value. */
static int complete(const char *field, const char *json, size_t n) {
	buf b = {0};
	puts_(&b, "{\"");
	puts_(&b, field);
	puts_(&b, "\":");
	put(&b, json, n);
	puts_(&b, "}");
	resp r = op(OP_COMPLETE, NULL, &b);
	if (r.status == ST_OK) return 0;
	outcome o = refused(&r, OP_COMPLETE);
	if (!strcmp(field, "error")) die("complete refused an error");
	return complete("error", o.v->raw, o.v->rawlen);
}

static int fail(outcome o) { return complete("error", o.v->raw, o.v->rawlen); }

/* ---- the workflow ----------------------------------------------------- */

static int workflow(void) {
	resp in = op(OP_INPUT, NULL, NULL);
	if (in.status != ST_OK) return fail(refused(&in, OP_INPUT));
	jval *input = parse_json(in.payload, in.len);
	jval *service = get(input, "service");
	if (!service || service->t != J_STR)
		return fail(failure("FatalError", "input has no service", -1, 0));

	outcome plan = step("planDeploy", service->raw, service->rawlen);
	if (!plan.ok) return fail(plan);
	jval *summary = get(plan.v, "summary");
	if (!summary || summary->t != J_STR)
		return fail(failure("FatalError", "plan has no summary", -1, 0));

	buf prompt = {0};
	puts_(&prompt, "Deploy ");
	put(&prompt, service->s, service->n);
	puts_(&prompt, "?\n\n");
	put(&prompt, summary->s, summary->n);
	buf ask = {0};
	puts_(&ask, "{\"prompt\":");
	put_jstr(&ask, prompt.p, prompt.n);
	puts_(&ask, ",\"display\":\"confirmation\",\"options\":["
	            "{\"id\":\"approve\",\"label\":\"Deploy\",\"style\":\"primary\"},"
	            "{\"id\":\"cancel\",\"label\":\"Cancel\"}]}");
	outcome answer = future(OP_ASK, NULL, &ask);
	if (!answer.ok) return fail(answer);
	if (!is_str(get(answer.v, "status"), "answered") || !is_str(get(answer.v, "optionId"), "approve")) {
		static const char rejected[] = "{\"deployed\":false,\"reason\":\"rejected\"}";
		return complete("result", rejected, sizeof rejected - 1);
	}

	outcome url = step("applyDeploy", plan.v->raw, plan.v->rawlen);
	if (!url.ok) return fail(url);
	if (url.v->t != J_STR) return fail(failure("FatalError", "applyDeploy returned no URL", -1, 0));
	buf out = {0};
	puts_(&out, "{\"deployed\":true,\"url\":");
	put(&out, url.v->raw, url.v->rawlen);
	puts_(&out, "}");
	return complete("result", out.p, out.n);
}

/* ---- the steps -------------------------------------------------------- */

typedef struct { const char *id; size_t idlen; long attempt; } stepctx;

static void side_effect(const char *what, const jval *service, const stepctx *sc) {
	buf b = {0};
	puts_(&b, "side effect: ");
	puts_(&b, what);
	puts_(&b, " deploy of ");
	put(&b, service->s, service->n);
	puts_(&b, " (step ");
	put(&b, sc->id, sc->idlen);
	puts_(&b, ", attempt ");
	put_int(&b, sc->attempt);
	puts_(&b, ")\n");
	write_all(1, b.p, b.n);
}

static void fatal(buf *out, const char *msg) {
	puts_(out, "{\"error\":{\"type\":\"FatalError\",\"message\":");
	put_jstr(out, msg, strlen(msg));
	puts_(out, "}}");
}

/* blank says whether s is empty or all white space, as Go's
 * strings.TrimSpace sees it (unicode.IsSpace). */
static int blank(const jval *s) {
	const unsigned char *p = (const unsigned char *)s->s, *end = p + s->n;
	while (p < end) {
		uint32_t r = *p++;
		if (r >= 0xc0 && end - p >= 1 && r < 0xe0) r = (r & 31) << 6 | (p[0] & 63), p += 1;
		else if (r >= 0xe0 && end - p >= 2 && r < 0xf0) r = (r & 15) << 12 | (p[0] & 63) << 6 | (p[1] & 63), p += 2;
		int space = (r >= '\t' && r <= '\r') || r == ' ' || r == 0x85 || r == 0xa0 || r == 0x1680 ||
		            (r >= 0x2000 && r <= 0x200a) || r == 0x2028 || r == 0x2029 || r == 0x202f ||
		            r == 0x205f || r == 0x3000;
		if (!space) return 0;
	}
	return 1;
}

/* planDeploy(service string) Plan */
static void plan_deploy(const jval *service, const stepctx *sc, buf *out) {
	if (!service || service->t != J_STR || blank(service)) return fatal(out, "no service named");
	side_effect("planned", service, sc);
	buf build = {0};
	puts_(&build, "build ");
	put(&build, service->s, service->n);
	buf summary = {0};
	put(&summary, build.p, build.n);
	puts_(&summary, " \xe2\x86\x92 push image \xe2\x86\x92 roll out 3 replicas"); /* → */
	puts_(out, "{\"result\":{\"service\":");
	put_jstr(out, service->s, service->n);
	puts_(out, ",\"summary\":");
	put_jstr(out, summary.p, summary.n);
	puts_(out, ",\"steps\":[");
	put_jstr(out, build.p, build.n);
	puts_(out, ",\"push image\",\"roll out 3 replicas\"]}}");
}

/* applyDeploy(plan Plan) string */
static void apply_deploy(const jval *plan, const stepctx *sc, buf *out) {
	const jval *service = get(plan, "service");
	if (!service || service->t != J_STR) return fatal(out, "plan has no service");
	side_effect("applied", service, sc);
	buf url = {0};
	puts_(&url, "https://");
	put(&url, service->s, service->n);
	puts_(&url, ".deploys.invalid/releases/");
	for (size_t i = 0; i < sc->idlen; i++) putc_(&url, sc->id[i] == ':' ? '-' : sc->id[i]);
	puts_(out, "{\"result\":");
	put_jstr(out, url.p, url.n);
	puts_(out, "}");
}

/* ---- exports ---------------------------------------------------------- */

SF_EXPORT("sandflow_abi_version")
int32_t sandflow_abi_version(void) { return 1; }

SF_EXPORT("sandflow_run")
int32_t sandflow_run(void) {
	/* A blocking guest runs its body once per instance: the host never
	 * calls sandflow_run again on an instance whose await did not return. */
	static int ran;
	if (ran++) die("sandflow_run called twice on one instance");
	arena_reset();
	return workflow();
}

SF_EXPORT("sandflow_step")
int32_t sandflow_step(void) {
	arena_reset();
	resp r = op(OP_STEP_INPUT, NULL, NULL);
	if (r.status != ST_OK) die("step_input refused");
	jval *in = parse_json(r.payload, r.len);
	jval *name = get(in, "name"), *id = get(in, "stepId"), *attempt = get(in, "attempt");
	if (!name || !id || id->t != J_STR) die("step_input without name or stepId");
	stepctx sc = {id->s, id->n, attempt && attempt->t == J_NUM ? strtol(attempt->raw, NULL, 10) : 0};
	buf out = {0};
	if (is_str(name, "planDeploy")) plan_deploy(get(in, "input"), &sc, &out);
	else if (is_str(name, "applyDeploy")) apply_deploy(get(in, "input"), &sc, &out);
	else fatal(&out, "unknown step");
	r = op(OP_STEP_COMPLETE, NULL, &out);
	if (r.status != ST_OK) {
		/* e.g. too_large: report the host's error as the attempt's */
		jval *e = parse_json(r.payload, r.len);
		if (!e || !get(e, "type")) die("step_complete refused");
		out.n = 0;
		puts_(&out, "{\"error\":");
		put(&out, e->raw, e->rawlen);
		puts_(&out, "}");
		if (op(OP_STEP_COMPLETE, NULL, &out).status != ST_OK) die("step_complete refused an error");
	}
	return 0;
}
