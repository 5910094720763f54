// The prelude of every program's runtime. It runs before the program, with
// the built-ins still intact, and keeps its own references to those it uses
// so a program that replaces them (JSON.stringify, Array.prototype.push)
// changes only what the program itself sees.
(function (host, depthLimit) {
  "use strict";
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  const keys = Object.keys;
  const isArray = Array.isArray;
  const defineProperty = Object.defineProperty;
  const getPrototypeOf = Object.getPrototypeOf;
  const freeze = Object.freeze;
  const SetCtor = Set;
  const setHas = Set.prototype.has;
  const setAdd = Set.prototype.add;
  const StringCtor = String;
  const apply = Reflect.apply;
  const promiseReject = Promise.reject.bind(Promise);

  // Properties are defined, not assigned: an assignment would call a
  // setter the program put on Object.prototype.
  class WorkflowProgramAgentError extends Error {
    constructor(code, message) {
      super(message);
      defineProperty(this, "name", { value: "WorkflowProgramAgentError", writable: true, configurable: true });
      defineProperty(this, "code", { value: code, writable: true, enumerable: true, configurable: true });
    }
  }
  // The errors ctx.agent throws, with their codes as made: the program can
  // construct the class, and change a caught error's code, but what its run
  // fails with comes from here.
  const genuine = new WeakMap();
  const genuineGet = WeakMap.prototype.get;
  const genuineSet = WeakMap.prototype.set;
  const agentError = (code, message) => {
    const e = new WorkflowProgramAgentError(code, message);
    apply(genuineSet, genuine, [e, code]);
    return e;
  };

  // describe reads what the run's error says of a thrown value: name,
  // message, stack, and the code of a genuine agent error. Each read may
  // run the program's getters or toString; one that throws reads as empty.
  function describe(v) {
    const str = (read) => {
      try {
        const x = read();
        return x === undefined || x === null ? "" : StringCtor(x);
      } catch (e) {
        return "";
      }
    };
    if (v === null || (typeof v !== "object" && typeof v !== "function")) {
      return ["", "", "", "", str(() => v)];
    }
    let code;
    try {
      code = apply(genuineGet, genuine, [v]);
    } catch (e) {}
    return [str(() => v.name), str(() => v.message), str(() => v.stack), code === undefined ? "" : code, ""];
  }

  // Code evaluation is not available: it would run source the parse-time
  // checks never saw.
  const deny = (what) => function () {
    throw new EvalError(what + " is not available: a workflow program cannot evaluate code");
  };
  const lock = (obj, name, value) =>
    defineProperty(obj, name, { value, writable: false, enumerable: false, configurable: false });
  lock(globalThis, "eval", deny("eval"));
  // The stand-in keeps the real prototype, so Function.prototype.call and
  // instanceof Function work as ever.
  const FunctionStandIn = deny("Function");
  defineProperty(FunctionStandIn, "prototype", { value: getPrototypeOf(function () {}), writable: false });
  lock(globalThis, "Function", FunctionStandIn);
  lock(getPrototypeOf(function () {}), "constructor", FunctionStandIn);
  lock(getPrototypeOf(async function () {}), "constructor", deny("AsyncFunction"));
  lock(getPrototypeOf(function* () {}), "constructor", deny("GeneratorFunction"));

  // tooDeep walks a value without recursion, so a 100k-deep array costs a
  // loop, not a stack. An object seen before is not walked again: cycles
  // end, and JSON.stringify reports them.
  function tooDeep(v) {
    const stack = [v];
    const depths = [1];
    const seen = new SetCtor();
    let n = 1;
    while (n > 0) {
      n--;
      const x = stack[n];
      const d = depths[n];
      if (x === null || typeof x !== "object") continue;
      if (d > depthLimit) return true;
      if (apply(setHas, seen, [x])) continue;
      apply(setAdd, seen, [x]);
      let ks;
      try {
        ks = keys(x);
      } catch (e) {
        continue; // a Proxy whose ownKeys throws: JSON.stringify will say so
      }
      for (let i = 0; i < ks.length; i++) {
        let c;
        try {
          c = x[ks[i]];
        } catch (e) {
          continue; // a throwing getter: JSON.stringify will say so
        }
        stack[n] = c;
        depths[n] = d + 1;
        n++;
      }
    }
    return false;
  }

  // encode is JSON.stringify with the program's limits: [json] or
  // [undefined, code, message].
  function encode(v, what) {
    if (tooDeep(v)) {
      return [undefined, "too_deep", what + " nests deeper than " + depthLimit + " levels"];
    }
    let s;
    try {
      s = stringify(v);
    } catch (e) {
      let msg;
      try {
        msg = StringCtor(e && e.message !== undefined ? e.message : e);
      } catch (e2) {
        msg = "JSON.stringify failed";
      }
      return [undefined, "not_serializable", what + " cannot be converted to JSON: " + msg];
    }
    if (s === undefined) return ["null"];
    // A toJSON method can return what the walk above never saw.
    const depth = host.depth(s);
    if (depth > depthLimit) {
      return [undefined, "too_deep", what + " nests " + depth + " levels deep as JSON; the limit is " + depthLimit];
    }
    return [s];
  }

  // agent is ctx.agent: every failure, a bad call as much as a failed
  // turn, is a rejected promise, so .catch, .then(ok, err) and
  // Promise.allSettled see all of them alike.
  function agent(name, options) {
    try {
      return call(name, options);
    } catch (e) {
      return promiseReject(e);
    }
  }

  function call(name, options) {
    if (typeof name !== "string" || name === "") {
      throw agentError("invalid_call", "ctx.agent: the first argument must be an agent name, a non-empty string");
    }
    if (name.length > 256) {
      throw agentError("invalid_call", "ctx.agent: the agent name is " + name.length + " characters long; the limit is 256 bytes");
    }
    if (options === null || typeof options !== "object" || isArray(options)) {
      throw agentError("invalid_call", `ctx.agent("${name}"): the second argument must be an object { message, outputSchema? }`);
    }
    const ks = keys(options);
    for (let i = 0; i < ks.length; i++) {
      if (ks[i] !== "message" && ks[i] !== "outputSchema") {
        throw agentError("invalid_call", `ctx.agent("${name}"): unknown option "${ks[i]}"; the options are message and outputSchema`);
      }
    }
    const message = options.message;
    const outputSchema = options.outputSchema;
    if (typeof message !== "string") {
      throw agentError("invalid_call", `ctx.agent("${name}"): message must be a string, not ${message === null ? "null" : typeof message}`);
    }
    if (outputSchema !== undefined && (outputSchema === null || typeof outputSchema !== "object" || isArray(outputSchema))) {
      throw agentError("invalid_call", `ctx.agent("${name}"): outputSchema must be a JSON Schema object`);
    }
    const enc = encode(outputSchema === undefined ? { message } : { message, outputSchema }, `ctx.agent("${name}") input`);
    if (enc[0] === undefined) {
      throw agentError(enc[1] === "too_deep" ? "input_too_large" : "invalid_call", enc[2]);
    }
    return host.agent(name, enc[0], outputSchema !== undefined);
  }

  const show = (v) => {
    if (typeof v === "string") return v;
    try {
      const s = stringify(v);
      return s === undefined ? StringCtor(v) : s;
    } catch (e) {
      return StringCtor(v);
    }
  };
  const writer = (stream) => function (...args) {
    let line = "";
    for (let i = 0; i < args.length; i++) line += (i > 0 ? " " : "") + show(args[i]);
    host.write(stream, line + "\n");
  };
  const console = freeze({
    log: writer(1), info: writer(1), debug: writer(1), warn: writer(2), error: writer(2),
  });
  lock(globalThis, "console", console);
  lock(globalThis, "WorkflowProgramAgentError", WorkflowProgramAgentError);

  return {
    ctx: freeze({ agent }),
    encode,
    parse,
    agentError,
    describe,
    // agentCode is the code of a genuine agent error, or "": it runs none
    // of the program's code.
    agentCode(v) {
      if (v === null || typeof v !== "object") return "";
      const code = apply(genuineGet, genuine, [v]);
      return code === undefined ? "" : code;
    },
    flush() {},
  };
})
