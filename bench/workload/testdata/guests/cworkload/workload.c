/*
 * cworkload: the benchmark workloads (bench/workload) in C against the
 * sandflow guest ABI (abi/README.md) with nothing but wasi-libc. It makes
 * the same ops, in the same order and activations, as the Go guest
 * (../workload), so that one history replays on both.
 *
 * Modes (the input's "mode"; "n" and "asks" are integers):
 *   steps     n sequential steps "inc" (v -> v+1) from 0; the result is n
 *   fanout    n agent turns with "echo", sent first, then awaited together;
 *             the result is how many completed
 *   askstep   n times a question, then a step "inc"; the result is n
 *   stepsask  n steps "inc", then "asks" questions; the result is n
 *
 * Awaiting: unlike examples/c-deploy, which blocks in its awaits and so is
 * replayed at every activation, this guest uses the returning await: its
 * body is a small state machine whose state lives in globals, so
 * sandflow_run can return 1 when it waits and carry on from the same place
 * when the host calls it again on the same (parked) instance. Each op that
 * makes a future is sent with the await flag; when the answer is suspend,
 * the future's id is kept in `pending` and the next call awaits it at the
 * same point of the machine. On replay the host answers every await from
 * the log within one call, so the machine never returns 1 there.
 *
 *   greet     no ops; the result is {"greeting":"hello "+name}, the work of a
 *             trivial tool (the input's "name" is a JSON string)
 *
 * bench_ops issues OPS_PER_CALL metadata ops, for the op round-trip
 * benchmark.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SF_IMPORT(n) __attribute__((import_module("sandflow"), import_name(n)))
#define SF_EXPORT(n) __attribute__((export_name(n)))

SF_IMPORT("op")
int32_t sf_op(int32_t kind, const void *name, int32_t name_len,
              const void *payload, int32_t payload_len,
              void *resp, int32_t resp_cap);
SF_IMPORT("read")
int32_t sf_read(void *ptr, int32_t len);

enum {
	OP_INPUT = 1, OP_METADATA = 2, OP_COMPLETE = 3, OP_STEP = 5, OP_ASK = 7,
	OP_AWAIT = 11, OP_STEP_INPUT = 12, OP_STEP_COMPLETE = 13, OP_AGENT = 16,
};
#define OP_FLAG_AWAIT 0x40000000u
enum { ST_OK = 0, ST_PENDING = 1, ST_REJECTED = 2, ST_SUSPEND = 3 };
#define AWAIT_ALL 0u
#define MAX_AWAIT 4096
#define OPS_PER_CALL 10000

/* ---- ops -------------------------------------------------------------- */

static char rbuf[65536];
static char *big;      /* a held body too large for rbuf */
static size_t bigcap;

typedef struct {
	uint32_t status, future;
	const char *payload;
	size_t len;
} resp;

static uint32_t le32(const char *p) {
	const unsigned char *u = (const unsigned char *)p;
	return u[0] | u[1] << 8 | u[2] << 16 | (uint32_t)u[3] << 24;
}

/* op sends an op; the answer's payload is valid until the next op. */
static resp op(uint32_t kind, const char *name, size_t nlen, const void *payload, size_t plen) {
	int32_t n = sf_op((int32_t)kind, name ? name : "", (int32_t)nlen, payload ? payload : "", (int32_t)plen,
	                  rbuf, (int32_t)sizeof rbuf);
	if (n < 8) __builtin_trap();
	const char *body = rbuf;
	if ((size_t)n > sizeof rbuf) {
		if ((size_t)n > bigcap) {
			free(big);
			bigcap = (size_t)n;
			big = malloc(bigcap);
			if (!big) __builtin_trap();
		}
		if (sf_read(big, n) != n) __builtin_trap();
		body = big;
	}
	return (resp){le32(body), le32(body + 4), body + 8, (size_t)n - 8};
}

/* ---- a little JSON ------------------------------------------------------ */

/* parse_long reads the integer at the start of s, after blanks. */
static long parse_long(const char *p, const char *end) {
	while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++;
	long v = 0, sign = 1;
	if (p < end && *p == '-') sign = -1, p++;
	while (p < end && *p >= '0' && *p <= '9') v = v * 10 + (*p++ - '0');
	return sign * v;
}

static int blank(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* member finds the member "key" in the JSON text s and returns where its
 * value starts, or NULL. Enough for what the host sends this guest, whose
 * strings never hold a quoted member name; the text may be indented (a
 * history file's is). */
static const char *member(const char *s, size_t n, const char *key) {
	size_t kl = strlen(key);
	const char *end = s + n;
	for (const char *p = s; p + kl + 2 <= end; p++) {
		if (*p != '"' || memcmp(p + 1, key, kl) || p[kl + 1] != '"') continue;
		const char *q = p + kl + 2;
		while (q < end && blank(*q)) q++;
		if (q == end || *q != ':') continue;
		for (q++; q < end && blank(*q); q++) {}
		return q;
	}
	return NULL;
}

/* int_member is the integer value of member key, or 0. */
static long int_member(const char *s, size_t n, const char *key) {
	const char *v = member(s, n, key);
	return v ? parse_long(v, s + n) : 0;
}

/* is_member says whether member key is the string value. */
static int is_member(const char *s, size_t n, const char *key, const char *value) {
	const char *v = member(s, n, key);
	size_t vl = strlen(value);
	return v && (size_t)(s + n - v) >= vl + 2 && v[0] == '"' && !memcmp(v + 1, value, vl) && v[vl + 1] == '"';
}

static int hexval(char c) {
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* hex4 reads four hex digits at p, or returns -1. */
static long hex4(const char *p, const char *end) {
	if (end - p < 4) return -1;
	long u = 0;
	for (int k = 0; k < 4; k++) {
		int h = hexval(p[k]);
		if (h < 0) return -1;
		u = u << 4 | h;
	}
	return u;
}

static size_t put_utf8(char *d, unsigned long r) {
	if (r < 0x80) return d[0] = (char)r, 1;
	if (r < 0x800) return d[0] = (char)(0xc0 | r >> 6), d[1] = (char)(0x80 | (r & 0x3f)), 2;
	if (r < 0x10000)
		return d[0] = (char)(0xe0 | r >> 12), d[1] = (char)(0x80 | (r >> 6 & 0x3f)), d[2] = (char)(0x80 | (r & 0x3f)), 3;
	d[0] = (char)(0xf0 | r >> 18), d[1] = (char)(0x80 | (r >> 12 & 0x3f));
	d[2] = (char)(0x80 | (r >> 6 & 0x3f)), d[3] = (char)(0x80 | (r & 0x3f));
	return 4;
}

/* string_value decodes the JSON string at p (its opening quote) into d,
 * which has room for end - p bytes (a decoded string is never longer than
 * its JSON), and returns its length, or -1 when it is not a string. An
 * unpaired surrogate becomes U+FFFD, as encoding/json makes it. */
static long string_value(const char *p, const char *end, char *d) {
	if (p >= end || *p != '"') return -1;
	size_t k = 0;
	for (p++; p < end; p++) {
		unsigned char c = (unsigned char)*p;
		if (c == '"') return (long)k;
		if (c < 0x20) return -1;
		if (c != '\\') {
			d[k++] = (char)c;
			continue;
		}
		if (++p == end) return -1;
		switch (*p) {
		case '"': case '\\': case '/': d[k++] = *p; break;
		case 'b': d[k++] = '\b'; break;
		case 'f': d[k++] = '\f'; break;
		case 'n': d[k++] = '\n'; break;
		case 'r': d[k++] = '\r'; break;
		case 't': d[k++] = '\t'; break;
		case 'u': {
			long u = hex4(p + 1, end);
			if (u < 0) return -1;
			p += 4;
			if (u >= 0xd800 && u < 0xdc00) {
				long lo = end - p >= 7 && p[1] == '\\' && p[2] == 'u' ? hex4(p + 3, end) : -1;
				if (lo >= 0xdc00 && lo < 0xe000) {
					u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
					p += 6;
				} else {
					u = 0xfffd;
				}
			} else if (u >= 0xdc00 && u < 0xe000) {
				u = 0xfffd;
			}
			k += put_utf8(d + k, (unsigned long)u);
			break;
		}
		default: return -1;
		}
	}
	return -1;
}

/* put_string writes s as a JSON string, escaped as encoding/json escapes
 * it (<, > and & too); bytes from 0x80 are copied as they are, so s must
 * be valid UTF-8 without U+2028 and U+2029 for the two to agree. */
static size_t put_string(char *d, const char *s, size_t n) {
	static const char hex[] = "0123456789abcdef";
	size_t k = 0;
	d[k++] = '"';
	for (size_t x = 0; x < n; x++) {
		unsigned char c = (unsigned char)s[x];
		const char *e = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\b' ? "\\b" : c == '\f' ? "\\f"
		              : c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
		if (e) {
			d[k++] = e[0], d[k++] = e[1];
		} else if (c < 0x20 || c == '<' || c == '>' || c == '&') {
			memcpy(d + k, "\\u00", 4), k += 4;
			d[k++] = hex[c >> 4], d[k++] = hex[c & 15];
		} else {
			d[k++] = (char)c;
		}
	}
	d[k++] = '"';
	return k;
}

static size_t put_int(char *d, long v) {
	char t[24];
	int i = sizeof t;
	unsigned long u = v < 0 ? -(unsigned long)v : (unsigned long)v;
	do t[--i] = '0' + u % 10; while (u /= 10);
	if (v < 0) t[--i] = '-';
	memcpy(d, t + i, sizeof t - i);
	return sizeof t - i;
}

/* ---- the workflow's state ------------------------------------------------ */

enum { M_STEPS, M_FANOUT, M_ASKSTEP, M_STEPSASK, M_GREET, M_UNKNOWN };

static int started, mode;
static long n, asks, i, j, v, done_count;
static int phase;
static uint32_t pending; /* the future the machine waits on at its current point */
static uint32_t *futures; /* fanout */

static int complete_result(long value) {
	char b[48] = "{\"result\":";
	size_t k = strlen(b);
	k += put_int(b + k, value);
	b[k++] = '}';
	if (op(OP_COMPLETE, NULL, 0, b, k).status != ST_OK) __builtin_trap();
	return 0;
}

static int complete_error(const char *msg) {
	char b[256];
	size_t k = 0;
	const char *pre = "{\"error\":{\"type\":\"FatalError\",\"message\":\"";
	memcpy(b, pre, strlen(pre)), k += strlen(pre);
	size_t ml = strlen(msg);
	if (ml > 180) ml = 180;
	memcpy(b + k, msg, ml), k += ml;
	memcpy(b + k, "\"}}", 3), k += 3;
	op(OP_COMPLETE, NULL, 0, b, k);
	return 0;
}

/* greet completes with {"greeting":"hello "+name} for the input's name. */
static int greet(const char *p, size_t l) {
	const char *v = member(p, l, "name");
	size_t nl = 0;
	char *name = malloc(l + 1), *out = malloc(6 * (l + 6) + 64);
	if (!name || !out) __builtin_trap();
	if (v) {
		long r = string_value(v, p + l, name);
		if (r < 0) {
			free(name), free(out);
			return complete_error("name is not a JSON string");
		}
		nl = (size_t)r;
	}
	char *hello = malloc(nl + 6);
	if (!hello) __builtin_trap();
	memcpy(hello, "hello ", 6), memcpy(hello + 6, name, nl);
	const char *pre = "{\"result\":{\"greeting\":";
	size_t k = strlen(pre);
	memcpy(out, pre, k);
	k += put_string(out + k, hello, nl + 6);
	out[k++] = '}', out[k++] = '}';
	if (op(OP_COMPLETE, NULL, 0, out, k).status != ST_OK) __builtin_trap();
	free(name), free(out), free(hello);
	return 0;
}

/* settle awaits `pending` with a returning await: 1 when the run must
 * suspend, else 0 with the settled value in *out (and *ok its state). */
static int settle(resp *out, int *ok) {
	unsigned char p[8] = {AWAIT_ALL, 0, 0, 0, pending, pending >> 8, pending >> 16, pending >> 24};
	resp r = op(OP_AWAIT, NULL, 0, p, 8);
	if (r.status == ST_SUSPEND) return 1;
	if (r.status != ST_OK || r.len < 12 || le32(r.payload) != pending) __builtin_trap();
	uint32_t state = le32(r.payload + 4), len = le32(r.payload + 8);
	if (len > r.len - 12) __builtin_trap();
	*ok = state == 1;
	*out = (resp){ST_OK, pending, r.payload + 12, len};
	pending = 0;
	return 0;
}

/* future sends an op that makes a future, with the await flag, or awaits
 * the one sent at this point before: 1 when the run must suspend. */
static int future(uint32_t kind, const char *name, const char *payload, size_t plen, resp *out, int *ok) {
	if (pending) return settle(out, ok);
	resp r = op(kind | OP_FLAG_AWAIT, name, name ? strlen(name) : 0, payload, plen);
	switch (r.status) {
	case ST_OK: case ST_REJECTED:
		*ok = r.status == ST_OK;
		*out = r;
		return 0;
	case ST_SUSPEND:
		pending = r.future;
		return 1;
	}
	__builtin_trap();
}

/* step runs inc(v): 1 when the run must suspend. */
static int step_inc(void) {
	char b[48] = "{\"input\":";
	size_t k = strlen(b);
	k += put_int(b + k, v);
	b[k++] = '}';
	resp r;
	int ok;
	if (future(OP_STEP, "inc", b, k, &r, &ok)) return 1;
	if (!ok) __builtin_trap();
	v = parse_long(r.payload, r.payload + r.len);
	return 0;
}

static const char question[] = "{\"prompt\":\"Go on?\",\"options\":[{\"id\":\"ok\",\"label\":\"OK\"}]}";

static int ask(void) {
	resp r;
	int ok;
	if (future(OP_ASK, NULL, question, sizeof question - 1, &r, &ok)) return 1;
	if (!ok || !is_member(r.payload, r.len, "status", "answered")) __builtin_trap();
	return 0;
}

/* fanout_send sends every agent turn; none is awaited yet. */
static void fanout_send(void) {
	futures = malloc(sizeof *futures * (n > 0 ? n : 1));
	if (!futures) __builtin_trap();
	for (long k = 0; k < n; k++) {
		char b[48] = "{\"message\":\"m";
		size_t l = strlen(b);
		l += put_int(b + l, k);
		memcpy(b + l, "\"}", 2), l += 2;
		resp r = op(OP_AGENT, "echo", 4, b, l);
		if (r.status == ST_PENDING || r.status == ST_OK) futures[k] = r.future;
		else __builtin_trap();
	}
}

/* fanout_await awaits the futures from i on, up to MAX_AWAIT at a time,
 * counting completed turns: 1 when the run must suspend. */
static int fanout_await(void) {
	static unsigned char *p;
	if (!p && !(p = malloc(4 + 4 * MAX_AWAIT))) __builtin_trap();
	while (i < n) {
		long k = n - i < MAX_AWAIT ? n - i : MAX_AWAIT;
		memset(p, 0, 4);
		for (long x = 0; x < k; x++) {
			uint32_t f = futures[i + x];
			unsigned char *q = p + 4 + 4 * x;
			q[0] = f, q[1] = f >> 8, q[2] = f >> 16, q[3] = f >> 24;
		}
		resp r = op(OP_AWAIT, NULL, 0, p, 4 + 4 * (size_t)k);
		if (r.status == ST_SUSPEND) return 1;
		if (r.status != ST_OK) __builtin_trap();
		for (size_t off = 0; off + 12 <= r.len;) {
			uint32_t state = le32(r.payload + off + 4), len = le32(r.payload + off + 8);
			if (len > r.len - off - 12) __builtin_trap();
			if (state == 1 && is_member(r.payload + off + 12, len, "status", "completed")) done_count++;
			off += 12 + len;
		}
		i += k;
	}
	return 0;
}

/* ---- exports ---------------------------------------------------------- */

SF_EXPORT("sandflow_abi_version")
int32_t sandflow_abi_version(void) { return 1; }

SF_EXPORT("sandflow_run")
int32_t sandflow_run(void) {
	if (!started) {
		started = 1;
		resp in = op(OP_INPUT, NULL, 0, NULL, 0);
		if (in.status != ST_OK) __builtin_trap();
		const char *p = in.payload;
		size_t l = in.len;
		mode = is_member(p, l, "mode", "steps")      ? M_STEPS
		     : is_member(p, l, "mode", "fanout")     ? M_FANOUT
		     : is_member(p, l, "mode", "askstep")    ? M_ASKSTEP
		     : is_member(p, l, "mode", "stepsask")   ? M_STEPSASK
		     : is_member(p, l, "mode", "greet")      ? M_GREET
		                                             : M_UNKNOWN;
		if (mode == M_GREET) return greet(p, l);
		n = int_member(p, l, "n");
		asks = int_member(p, l, "asks");
	}
	switch (mode) {
	case M_STEPS:
		for (; i < n; i++)
			if (step_inc()) return 1;
		return complete_result(v);
	case M_FANOUT:
		if (phase == 0) fanout_send(), phase = 1;
		if (fanout_await()) return 1;
		return complete_result(done_count);
	case M_ASKSTEP:
		for (; i < n; i++, phase = 0) {
			if (phase == 0) {
				if (ask()) return 1;
				phase = 1;
			}
			if (step_inc()) return 1;
		}
		return complete_result(v);
	case M_STEPSASK:
		for (; i < n; i++)
			if (step_inc()) return 1;
		for (; j < asks; j++)
			if (ask()) return 1;
		return complete_result(v);
	}
	return complete_error("unknown mode");
}

SF_EXPORT("sandflow_step")
int32_t sandflow_step(void) {
	resp r = op(OP_STEP_INPUT, NULL, 0, NULL, 0);
	if (r.status != ST_OK) __builtin_trap();
	char out[64];
	size_t k;
	if (is_member(r.payload, r.len, "name", "inc")) {
		long in = int_member(r.payload, r.len, "input");
		memcpy(out, "{\"result\":", 10), k = 10;
		k += put_int(out + k, in + 1);
		out[k++] = '}';
	} else {
		static const char e[] = "{\"error\":{\"type\":\"FatalError\",\"message\":\"unknown step\"}}";
		memcpy(out, e, sizeof e - 1), k = sizeof e - 1;
	}
	if (op(OP_STEP_COMPLETE, NULL, 0, out, k).status != ST_OK) __builtin_trap();
	return 0;
}

/* bench_ops issues OPS_PER_CALL metadata ops and returns the sum of the
 * body lengths, so that the calls cannot be dropped. */
SF_EXPORT("bench_ops")
int32_t bench_ops(void) {
	uint32_t sum = 0;
	for (int k = 0; k < OPS_PER_CALL; k++)
		sum += (uint32_t)sf_op(OP_METADATA, "", 0, "", 0, rbuf, (int32_t)sizeof rbuf);
	return (int32_t)sum;
}
