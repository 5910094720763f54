// The prelude of an authored tool script, run after shim.js: the globals a
// script uses (defineWorkflowTool, sleep, createHook, createWebhook,
// getWorkflowMetadata, FatalError, RetryableError, Response) and the
// driver of its entry point. Like shim.js it keeps its own references to
// the built-ins it uses.
//
// mode is "workflow" (a start or resume of a run), "step" (one step
// attempt) or "define" (reading the tool's definition at registration).
// Ops are issued through host.future (ops that make a future: a promise)
// and host.call (ops answered at once: the value's JSON text).
(function (host, base, mode, ops) {
  "use strict";
  // The script can replace any global; these are the originals.
  const { Error, TypeError, SyntaxError } = globalThis;
  const defineProperty = Object.defineProperty;
  const create = Object.create;
  const getPrototypeOf = Object.getPrototypeOf;
  const generatorProto = Object.getPrototypeOf(function* () {});
  const floor = Math.floor;
  const indexOf = Array.prototype.indexOf;
  const join = Array.prototype.join;
  const toLowerCase = String.prototype.toLowerCase;
  const maxSafe = Number.MAX_SAFE_INTEGER;
  const disposeSymbol = Symbol.dispose;
  const freeze = Object.freeze;
  const keys = Object.keys;
  const isArray = Array.isArray;
  const apply = Reflect.apply;
  const then = Promise.prototype.then;
  const promiseResolve = Promise.resolve.bind(Promise);
  const promiseReject = Promise.reject.bind(Promise);
  const StringCtor = String;
  const NumberCtor = Number;
  const isFinite = Number.isFinite;
  const DateCtor = Date;
  const dateGetTime = Date.prototype.getTime;
  // shim.js has replaced the global Function; the prototype is the same.
  const fnToString = Object.getPrototypeOf(function () {}).toString;
  const regexpExec = RegExp.prototype.exec;
  const asyncIterator = Symbol.asyncIterator;

  const lock = (obj, name, value) =>
    defineProperty(obj, name, { value, writable: false, enumerable: false, configurable: false });
  const setField = (obj, name, value) =>
    defineProperty(obj, name, { value, writable: true, enumerable: true, configurable: true });

  // The errors of the Workflow SDK.
  class FatalError extends Error {
    constructor(message) {
      super(message);
      defineProperty(this, "name", { value: "FatalError", writable: true, configurable: true });
      setField(this, "fatal", true);
    }
  }
  class RetryableError extends Error {
    constructor(message, options) {
      super(message);
      defineProperty(this, "name", { value: "RetryableError", writable: true, configurable: true });
      if (options !== undefined && options !== null && options.retryAfter !== undefined) {
        setField(this, "retryAfter", options.retryAfter);
      }
    }
  }

  // copyHeaders copies headers as strings; undefined when there are none.
  function copyHeaders(headers) {
    if (headers === undefined || headers === null) return undefined;
    const h = {};
    const ks = keys(headers);
    for (let k = 0; k < ks.length; k++) h[ks[k]] = StringCtor(headers[ks[k]]);
    return h;
  }

  // A Response for createWebhook's respondWith and request.respondWith:
  // a status, headers and a text body.
  class Response {
    constructor(body, init) {
      const i = init === undefined || init === null ? {} : init;
      setField(this, "status", i.status === undefined ? 200 : NumberCtor(i.status));
      setField(this, "headers", copyHeaders(i.headers) || {});
      setField(this, "body", body === undefined || body === null ? "" : typeof body === "string" ? body : base.encode(body, "the response body")[0] || "");
    }
  }

  // toError turns an error object from the host into an Error of the
  // matching class.
  function toError(eo) {
    if (eo === null || typeof eo !== "object") return new Error(StringCtor(eo));
    const message = typeof eo.message === "string" ? eo.message : "";
    let e;
    if (eo.type === "FatalError") e = new FatalError(message);
    else if (eo.type === "RetryableError") e = new RetryableError(message);
    else {
      e = new Error(message);
      if (typeof eo.type === "string" && eo.type !== "") {
        defineProperty(e, "name", { value: eo.type, writable: true, configurable: true });
      }
    }
    setField(e, "type", typeof eo.type === "string" ? eo.type : "Error");
    if (eo.details !== undefined) setField(e, "details", eo.details);
    return e;
  }

  // toObject is the error object a thrown value becomes: as a step's
  // failure, or the run's. The host reads its fields one by one; it has no
  // prototype, so neither setting nor reading them can reach accessors or
  // a toJSON the script put on Object.prototype.
  function toObject(v) {
    const d = base.describe(v);
    let type = d[0] === "" ? "Error" : d[0];
    let message = d[1];
    if (d[0] === "" && d[1] === "") message = d[4] === "" ? "a value that cannot be shown" : d[4];
    const eo = create(null);
    eo.type = type;
    eo.message = message;
    if (v !== null && typeof v === "object") {
      let retryAfter;
      try {
        retryAfter = v.retryAfter;
      } catch (e) {}
      if (type === "RetryableError" && retryAfter !== undefined) {
        const ms = retryAfterMs(retryAfter);
        if (ms > 0) eo.retryAfterMs = ms;
      }
      if (type === "RetryableError") eo.retryable = true;
    }
    if (d[2] !== "") eo.stack = d[2];
    return eo;
  }

  // Durations: a number of milliseconds, or text such as "1h", "30 min",
  // "2.5 days".
  const units = {
    __proto__: null,
    ms: 1, msec: 1, msecs: 1, millisecond: 1, milliseconds: 1,
    s: 1000, sec: 1000, secs: 1000, second: 1000, seconds: 1000,
    m: 60000, min: 60000, mins: 60000, minute: 60000, minutes: 60000,
    h: 3600000, hr: 3600000, hrs: 3600000, hour: 3600000, hours: 3600000,
    d: 86400000, day: 86400000, days: 86400000,
    w: 604800000, week: 604800000, weeks: 604800000,
    y: 31557600000, yr: 31557600000, yrs: 31557600000, year: 31557600000, years: 31557600000,
  };
  const durationRE = /^\s*(\d+(?:\.\d+)?|\.\d+)\s*([a-z]*)\s*$/i;
  function durationMs(d, what) {
    if (typeof d === "number") {
      if (!isFinite(d) || d < 0) throw new TypeError(what + ": a duration must be a finite number of milliseconds, 0 or more, not " + d);
      return d;
    }
    if (typeof d === "string") {
      const m = apply(regexpExec, durationRE, [d]);
      const unit = m === null ? undefined : m[2] === "" ? 1 : units[apply(toLowerCase, m[2], [])];
      if (unit === undefined) {
        throw new TypeError(what + ': "' + d + '" is not a duration such as "30s", "10 min", "1h" or "2 days"');
      }
      return NumberCtor(m[1]) * unit;
    }
    throw new TypeError(what + ": a duration is a number of milliseconds or a string such as \"1h\", not " + (d === null ? "null" : typeof d));
  }
  function retryAfterMs(v) {
    if (v instanceof DateCtor) return apply(dateGetTime, v, []) - DateCtor.now();
    try {
      return durationMs(v, "retryAfter");
    } catch (e) {
      return 0;
    }
  }

  // payload encodes an op's payload, throwing a TypeError when it is not
  // JSON.
  function payload(v, what) {
    const enc = base.encode(v, what);
    if (enc[0] === undefined) throw new TypeError(enc[2]);
    return enc[0];
  }

  // future issues an op that makes a future; rejections become errors.
  function future(kind, name, body) {
    return apply(then, host.future(kind, name, body), [undefined, (eo) => { throw toError(eo); }]);
  }

  const inWorkflow = (what) => {
    if (mode !== "workflow") {
      throw new Error(what + " can be called only in the workflow body" + (mode === "step" ? ", not in a step" : ", not while the script loads"));
    }
  };

  // sleep(duration | Date): a durable timer; resolves to undefined.
  function sleep(d) {
    inWorkflow("sleep");
    let req;
    if (d instanceof DateCtor) {
      const t = apply(dateGetTime, d, []);
      if (!isFinite(t)) throw new TypeError("sleep: the Date is invalid");
      req = { until: t };
    } else {
      // Past what JSON can carry as an integer, the host's own bound
      // says what the limit is.
      const ms = floor(durationMs(d, "sleep"));
      req = { ms: ms > maxSafe ? maxSafe : ms };
    }
    return apply(then, future(ops.sleep, "", payload(req, "sleep")), [() => undefined]);
  }

  function checkOptions(what, o, allowed) {
    if (o === undefined) return {};
    if (o === null || typeof o !== "object" || isArray(o)) throw new TypeError(what + ": the options must be an object");
    const ks = keys(o);
    for (let i = 0; i < ks.length; i++) {
      if (apply(indexOf, allowed, [ks[i]]) < 0) {
        throw new TypeError(what + ': unknown option "' + ks[i] + '"; the options are ' + apply(join, allowed, [", "]));
      }
    }
    return o;
  }

  function makeHook(id, created, receive) {
    let disposed = false;
    const next = () => future(ops.hookNext, "", payload({ hook: id }, "hook"));
    const hook = {
      token: created.token,
      then(onFulfilled, onRejected) {
        return apply(then, apply(then, next(), [receive]), [onFulfilled, onRejected]);
      },
      getConflict() {
        return promiseResolve(created.conflict === undefined ? null : created.conflict);
      },
      dispose() {
        if (disposed) return;
        disposed = true;
        host.call(ops.hookDispose, "", payload({ hook: id }, "hook"));
      },
      [asyncIterator]() {
        return {
          next: () => apply(then, apply(then, next(), [receive]), [(value) => ({ value, done: false })]),
          return: () => {
            hook.dispose();
            return promiseResolve({ value: undefined, done: true });
          },
        };
      },
    };
    if (typeof disposeSymbol === "symbol") hook[disposeSymbol] = hook.dispose;
    return hook;
  }

  // createHook({ token?, metadata? }): payloads sent to the token, in order.
  function createHook(options) {
    inWorkflow("createHook");
    const o = checkOptions("createHook", options, ["token", "metadata"]);
    if (o.token !== undefined && (typeof o.token !== "string" || o.token === "")) {
      throw new TypeError("createHook: token must be a non-empty string");
    }
    const req = {};
    if (o.token !== undefined) req.token = o.token;
    if (o.metadata !== undefined) req.metadata = o.metadata;
    const r = host.call(ops.hookCreate, "", payload(req, "createHook"));
    return makeHook(r[0], base.parse(r[1]), (v) => v);
  }

  function httpResponse(r, what) {
    if (r === null || typeof r !== "object") throw new TypeError(what + ": a response is a Response or { status, headers?, body? }");
    const out = { status: r.status === undefined ? 200 : NumberCtor(r.status) };
    const headers = copyHeaders(r.headers);
    if (headers !== undefined) out.headers = headers;
    if (r.body !== undefined && r.body !== null && r.body !== "") {
      out.body = typeof r.body === "string" ? r.body : payload(r.body, what + " body");
    }
    return out;
  }

  // createWebhook({ respondWith? }): a hook whose URL receives HTTP
  // requests; with respondWith "manual", answer each with
  // request.respondWith(response).
  function createWebhook(options) {
    inWorkflow("createWebhook");
    const o = checkOptions("createWebhook", options, ["respondWith"]);
    const spec = {};
    if (o.respondWith === "manual") spec.manual = true;
    else if (o.respondWith !== undefined) spec.respondWith = httpResponse(o.respondWith, "createWebhook respondWith");
    const r = host.call(ops.hookCreate, "", payload({ webhook: spec }, "createWebhook"));
    const id = r[0];
    const created = base.parse(r[1]);
    const receive = (req) => {
      const body = req.body === undefined ? "" : req.body;
      const request = {
        method: req.method,
        url: req.url,
        headers: req.headers === undefined ? {} : req.headers,
        body,
        bodyEncoding: req.bodyEncoding,
        text() {
          return promiseResolve(body);
        },
        json() {
          try {
            return promiseResolve(base.parse(body));
          } catch (e) {
            return promiseReject(e);
          }
        },
        respondWith(response) {
          if (!spec.manual) throw new Error("respondWith: this webhook answers by itself; create it with respondWith: \"manual\"");
          const res = httpResponse(response, "respondWith");
          res.hook = id;
          res.request = req.index;
          host.call(ops.webhookRespond, "", payload(res, "respondWith"));
        },
      };
      return freeze(request);
    };
    const hook = makeHook(id, created, receive);
    hook.url = created.url;
    return hook;
  }

  // getStepMetadata(): the attempt a step runs in.
  let stepInfo;
  function getStepMetadata() {
    if (stepInfo === undefined) throw new Error("getStepMetadata can be called only in a step");
    return stepInfo;
  }

  function getWorkflowMetadata() {
    const m = base.parse(host.call(ops.metadata, "", "")[1]);
    delete m.agents; // ctx.agents has them
    return m;
  }

  // The script's steps. The compiler makes the script's first statement
  // [a, b] = __sandflow.steps(["a", a, "b", b]): the declared functions,
  // hoisted, are kept here, and each binding gets a stand-in. In the
  // workflow body the stand-in issues a step op (the step runs in a step
  // attempt, and replay reuses its result); elsewhere it runs the step.
  // What the script later does to its bindings, or declares in a step's
  // scope, changes neither.
  const stepFns = create(null);
  let stepsDeclared = false;
  // A stand-in reads as its step's text, however it is asked for: the
  // shared Function.prototype.toString looks stand-ins up here (and reads
  // as the native one itself).
  const textOf = new WeakMap();
  const textOfGet = WeakMap.prototype.get;
  const textOfSet = WeakMap.prototype.set;
  const fnProto = Object.getPrototypeOf(function () {});
  const toStringStandIn = {
    toString() {
      const f = apply(textOfGet, textOf, [this]);
      return apply(fnToString, f === undefined ? this : f, []);
    },
  }.toString;
  apply(textOfSet, textOf, [toStringStandIn, fnToString]);
  defineProperty(fnProto, "toString", { value: toStringStandIn, writable: true, configurable: true });
  function declareSteps(list) {
    if (stepsDeclared) throw new TypeError("__sandflow.steps is called once, by the step compiler");
    stepsDeclared = true;
    const standIns = [];
    for (let i = 0; i + 1 < list.length; i += 2) {
      const name = list[i];
      const fn = list[i + 1];
      const standIn = function (...args) {
        return mode === "workflow" ? step(name, standIn, args) : apply(fn, this, args);
      };
      defineProperty(standIn, "name", { value: name, configurable: true });
      defineProperty(standIn, "length", { value: fn.length, configurable: true });
      apply(textOfSet, textOf, [standIn, fn]);
      stepFns[name] = fn;
      standIns[i / 2] = standIn;
    }
    return standIns;
  }

  // step issues the op of a step call. Its arguments are JSON values, or
  // undefined: those at the end are left off, and the positions of others
  // go with the input ({ args, undefined: [i...] }), so the attempt gets
  // undefined where the caller passed it and default parameters apply as
  // in a direct call. An argument that is one of the run's abort signals
  // goes as its position and state ({ signals: [{ i, aborted, reason }] }):
  // the attempt gets a signal that sees the run's aborts from then on.
  function step(name, fn, args) {
    let n = args.length;
    while (n > 0 && args[n - 1] === undefined) n--;
    const list = [];
    const undef = [];
    const sigs = [];
    for (let i = 0; i < n; i++) {
      const a = args[i];
      if (typeof a === "function" || typeof a === "symbol") {
        throw new TypeError("the input of step " + name + " is not JSON: argument " + (i + 1) + " is a " + typeof a);
      }
      if (isOurSignal(a)) {
        const s = { i, aborted: a.aborted };
        if (a.aborted) s.reason = a.reason.reason;
        sigs[sigs.length] = s;
        list[i] = null;
        continue;
      }
      if (a === undefined) undef[undef.length] = i;
      list[i] = a === undefined ? null : a;
    }
    let input = list;
    if (undef.length > 0 || sigs.length > 0) {
      input = { args: list };
      if (undef.length > 0) input.undefined = undef;
      if (sigs.length > 0) input.signals = sigs;
    }
    const req = { input };
    const policy = retryPolicy(name, fn);
    if (policy !== undefined) req.retry = policy;
    return future(ops.step, name, payload(req, "the input of step " + name));
  }
  function retryPolicy(name, fn) {
    const r = fn.retry;
    const n = fn.maxRetries;
    if (r === undefined && n === undefined) return undefined;
    const p = {};
    if (r !== undefined) {
      if (r === null || typeof r !== "object") throw new TypeError(name + ".retry must be an object { maxAttempts?, initialBackoffMs?, maxBackoffMs?, backoffFactor? }");
      const ks = ["maxAttempts", "initialBackoffMs", "maxBackoffMs", "backoffFactor"];
      for (let i = 0; i < ks.length; i++) if (r[ks[i]] !== undefined) p[ks[i]] = NumberCtor(r[ks[i]]);
    }
    if (n !== undefined) {
      if (typeof n !== "number" || !(n >= 0) || n !== floor(n)) throw new TypeError(name + ".maxRetries must be an integer, 0 or more");
      p.maxAttempts = n + 1;
    }
    return p;
  }

  // Abort signals. One signal op at a time waits for the run's next abort
  // (task_cancel, a cancelled or failed turn, the end of the session, a
  // steer); when it fires, the signal it serves aborts with an AbortError
  // and the next signal gets a new op. An execute or task body has one
  // signal, ctx.abortSignal; a serve body one per stretch of work, which a
  // reply or an abort retires.
  let signalOp;
  let currentSignal;
  const ourSignals = new WeakMap(); // the signals made here
  const ourSignalsGet = WeakMap.prototype.get;
  const ourSignalsSet = WeakMap.prototype.set;
  const isOurSignal = (s) => s !== null && typeof s === "object" && apply(ourSignalsGet, ourSignals, [s]) === true;
  // signalObject makes an AbortSignal-like object whose state comes from
  // state() ({ aborted, reason }); fire() runs its abort listeners.
  function signalObject(state) {
    const listeners = [];
    let onabort = null;
    const signal = freeze({
      get aborted() {
        return state().aborted;
      },
      get reason() {
        return state().reason;
      },
      get onabort() {
        return onabort;
      },
      set onabort(fn) {
        onabort = fn;
      },
      throwIfAborted() {
        const s = state();
        if (s.aborted) throw s.reason;
      },
      addEventListener(type, fn) {
        if (type === "abort" && typeof fn === "function") listeners[listeners.length] = fn;
      },
      removeEventListener(type, fn) {
        for (let i = 0; i < listeners.length; i++) if (listeners[i] === fn) listeners[i] = undefined;
      },
    });
    const fire = () => {
      const event = freeze({ type: "abort", target: signal });
      if (typeof onabort === "function") apply(onabort, signal, [event]);
      for (let i = 0; i < listeners.length; i++) if (listeners[i] !== undefined) apply(listeners[i], signal, [event]);
    };
    return { signal, fire };
  }
  // abortedState is the state of a signal aborted for why.
  function abortedState(why) {
    const reason = new Error("the call was aborted (" + why + ")");
    defineProperty(reason, "name", { value: "AbortError", writable: true, configurable: true });
    setField(reason, "reason", why);
    return { aborted: true, reason };
  }
  const notAborted = freeze({ aborted: false, reason: undefined });
  function makeSignal() {
    let st = notAborted;
    const { signal, fire } = signalObject(() => st);
    const abort = (why) => {
      st = abortedState(why);
      fire();
    };
    apply(ourSignalsSet, ourSignals, [signal, true]);
    currentSignal = { signal, abort };
    if (signalOp === undefined) {
      signalOp = apply(then, future(ops.signal, "", ""), [(info) => {
        signalOp = undefined;
        const c = currentSignal;
        currentSignal = undefined;
        if (c !== undefined) c.abort(info.reason);
      }]);
    }
    return signal;
  }
  let bodySignal;
  function abortSignal() {
    inWorkflow("ctx.abortSignal");
    if (bodySignal === undefined) bodySignal = makeSignal();
    return bodySignal;
  }

  // A serve body's calls: receive() resolves with the next call; a second
  // receive() while one is pending returns the same promise. waiting counts
  // the calls received and not yet answered by ctx.reply.
  let pendingReceive;
  let waiting = 0;
  let received = 0; // one past the highest call index delivered to the body
  let stretch;
  function receive() {
    inWorkflow("receive");
    if (pendingReceive !== undefined) return pendingReceive;
    pendingReceive = apply(then, future(ops.receive, "", ""), [(call) => {
      pendingReceive = undefined;
      waiting++;
      if (call.index >= received) received = call.index + 1;
      // Calls in one stretch of work share its signal.
      if (stretch === undefined || stretch.aborted || currentSignal === undefined || currentSignal.signal !== stretch) {
        stretch = makeSignal();
      }
      return freeze({ input: call.input, callId: call.callId, abortSignal: stretch });
    }]);
    return pendingReceive;
  }
  // ctx.reply(output): answers every call received so far (its receive()
  // promise resolved) and withdraws the questions still open; the task
  // goes idle until its next call, and the stretch's signal is retired. A
  // reply with no call waiting is dropped.
  function reply(output) {
    inWorkflow("ctx.reply");
    const out = payload(output === undefined ? null : output, "ctx.reply");
    const r = base.parse(host.call(ops.reply, "", '{"received":' + received + ',"output":' + out + "}")[1]);
    waiting = 0;
    if (currentSignal !== undefined && currentSignal.signal === stretch) currentSignal = undefined;
    stretch = undefined;
    return r.answered;
  }

  // ctx.ask(request): a question to a person; resolves to the answer.
  function ask(request, options) {
    inWorkflow("ctx.ask");
    if (definition.entry === "serve" && waiting === 0) {
      throw new Error("ctx.ask: no call is waiting (a serve body asks while it serves a call it received and has not replied to)");
    }
    const o = checkOptions("ctx.ask", options, ["signal"]);
    if (o.signal !== undefined && !isOurSignal(o.signal)) {
      throw new TypeError("ctx.ask: signal must be ctx.abortSignal or a call's abortSignal");
    }
    if (request === null || typeof request !== "object" || isArray(request)) {
      throw new TypeError("ctx.ask: the request must be an object { prompt, title?, display?, options?, allowFreeform? }");
    }
    // An abort withdraws every open question of the run, so the signal
    // adds nothing then; one that has already aborted means the question
    // is never asked.
    if (o.signal !== undefined && o.signal.aborted) return promiseResolve(freeze({ status: "cancelled" }));
    return future(ops.ask, "", payload(request, "ctx.ask"));
  }

  // ctx.agent(name, { model? }): a session with the named agent, opened
  // by its first send(message, { outputSchema?, signal? }). Each
  // response.result() resolves when that message's turn ends; a message
  // sent while a turn runs goes with the session's next turn. The session
  // keeps its conversation between turns.
  let sessions = 0;
  function agent(name, options) {
    inWorkflow("ctx.agent");
    if (typeof name !== "string" || name === "") throw new TypeError("ctx.agent: the first argument must be an agent name");
    const what = "ctx.agent(\"" + name + "\")";
    const o = checkOptions(what, options, ["model"]);
    let model;
    if (typeof o.model === "string") model = { model: o.model };
    else if (o.model !== undefined) {
      if (o.model === null || typeof o.model !== "object") throw new TypeError(what + ": model is a model id or { model, modelContextWindowTokens?, reasoning? }");
      model = checkOptions(what + " model", o.model, ["model", "modelContextWindowTokens", "reasoning"]);
    }
    let key;
    return freeze({
      name,
      send(message, sendOptions) {
        try {
          const so = checkOptions("send", sendOptions, ["outputSchema", "signal"]);
          const req = {};
          if (typeof message === "string") req.message = message;
          else if (isArray(message)) req.parts = message;
          else throw new TypeError("send: a message is text or an array of up to 64 text and file parts");
          if (so.outputSchema !== undefined) req.outputSchema = so.outputSchema;
          if (model !== undefined) req.model = model;
          if (so.signal !== undefined) {
            // The run's abort signals are the ones there are: the turn
            // ends cancelled when the run is aborted (or was already).
            if (!isOurSignal(so.signal)) {
              throw new TypeError("send: signal must be ctx.abortSignal or a call's abortSignal");
            }
            if (so.signal.aborted) {
              // Never sent: the turn ends cancelled at once.
              const cancelled = promiseResolve(freeze({ status: "cancelled" }));
              return promiseResolve(freeze({ result: () => cancelled }));
            }
            req.cancelOnAbort = true;
          }
          if (key === undefined) key = "s" + ++sessions;
          req.session = key;
          const turn = future(ops.agent, name, payload(req, "send"));
          return promiseResolve(freeze({ result: () => turn }));
        } catch (e) {
          return promiseReject(e);
        }
      },
    });
  }

  // ctx.agents: the agents the call may open, by name, as they were when
  // the run started.
  let agentsList;
  function agents() {
    if (agentsList === undefined) {
      const list = base.parse(host.call(ops.metadata, "", "")[1]).agents || [];
      const byName = create(null);
      for (let i = 0; i < list.length; i++) byName[list[i].name] = freeze({ name: list[i].name, description: list[i].description || "" });
      agentsList = freeze(byName);
    }
    return agentsList;
  }

  // The tool's definition, from defineWorkflowTool.
  let definition;
  const entries = ["execute", "task", "serve"];
  function defineWorkflowTool(def) {
    if (definition !== undefined) throw new Error("defineWorkflowTool: a script defines one tool; it was called twice");
    if (def === null || typeof def !== "object") throw new TypeError("defineWorkflowTool: the definition must be an object");
    checkOptions("defineWorkflowTool", def, ["description", "inputSchema", "execute", "task", "serve"]);
    if (typeof def.description !== "string" || def.description === "") {
      throw new TypeError("defineWorkflowTool: description must be a non-empty string");
    }
    if (def.inputSchema === null || typeof def.inputSchema !== "object" || isArray(def.inputSchema)) {
      throw new TypeError("defineWorkflowTool: inputSchema must be a JSON Schema object");
    }
    const found = [];
    for (let i = 0; i < entries.length; i++) if (def[entries[i]] !== undefined) found[found.length] = entries[i];
    if (found.length !== 1) {
      throw new TypeError("defineWorkflowTool: define exactly one entry point, execute, task or serve; found " + (found.length === 0 ? "none" : apply(join, found, [" and "])));
    }
    const entry = found[0];
    const fn = def[entry];
    if (typeof fn !== "function") throw new TypeError("defineWorkflowTool: " + entry + " must be a function");
    // A generator's body would never run: calling it only makes the
    // generator object.
    if (getPrototypeOf(fn) === generatorProto) {
      throw new TypeError("defineWorkflowTool: " + entry + " must be an async function, not a generator; report progress with ctx.progress(value) instead of yield");
    }
    if (!host.isWorkflow(apply(fnToString, fn, []))) {
      throw new SyntaxError("defineWorkflowTool: " + entry + ' must start with the "use workflow" directive');
    }
    definition = freeze({
      description: def.description,
      inputSchema: payload(def.inputSchema, "inputSchema"),
      entry,
      fn,
    });
    return definition;
  }

  // run calls the entry point. (goja has no async generators, so progress
  // is ctx.progress(value), not yield.)
  async function run(input, ctx) {
    if (definition.entry === "serve") return await definition.fn(receive, ctx);
    return await definition.fn(input, ctx);
  }

  // ctx.progress(value): a progress snapshot for the pending call, as the
  // documented yield; a body that returns nothing (or null) ends with the
  // last one.
  function progress(value) {
    inWorkflow("ctx.progress");
    host.call(ops.progress, "", payload(value === undefined ? null : value, "a progress value"));
  }

  lock(globalThis, "defineWorkflowTool", defineWorkflowTool);
  lock(globalThis, "sleep", sleep);
  lock(globalThis, "createHook", createHook);
  lock(globalThis, "createWebhook", createWebhook);
  lock(globalThis, "getWorkflowMetadata", getWorkflowMetadata);
  lock(globalThis, "getStepMetadata", getStepMetadata);
  lock(globalThis, "FatalError", FatalError);
  lock(globalThis, "RetryableError", RetryableError);
  lock(globalThis, "Response", Response);
  lock(globalThis, "__sandflow", freeze({ steps: declareSteps }));

  return {
    definition: () => definition,
    ctx: (toolName, callId) => {
      const ctx = definition.entry === "serve" ? { toolName, ask, agent, reply } : { toolName, callId, ask, agent, progress };
      defineProperty(ctx, "agents", { get: agents, enumerable: true });
      if (definition.entry !== "serve") defineProperty(ctx, "abortSignal", { get: abortSignal, enumerable: true });
      return freeze(ctx);
    },
    run,
    setStep(info) {
      stepInfo = freeze(info);
    },
    // stepSignal is, in a step attempt, the abort signal the workflow
    // passed it: aborted from the start if it was then, and otherwise
    // asking the host, each time it is read, whether the run has been
    // aborted since the step was called. A step runs to its end without
    // waiting, so its listeners run when a read finds the abort.
    stepSignal(aborted, why) {
      let st = aborted ? abortedState(why) : undefined;
      const o = signalObject(() => {
        if (st === undefined) {
          const r = base.parse(host.call(ops.stepAborted, "", "")[1]);
          if (!r.aborted) return notAborted;
          st = abortedState(r.reason);
          o.fire();
        }
        return st;
      });
      return o.signal;
    },
    // stepFn is the declared function of a step, or undefined.
    stepFn: (name) => stepFns[name],
    toObject,
    toError,
  };
})
