// A real MCP client from the npm registry against sandflow serve's /mcp:
// the MCP Inspector's CLI lists the tools and calls one; mcpdo (the
// Inspector's connection CLI) completes a task whose question it answers
// as an elicitation, in both protocol eras.
//
//   npm ci && npm test          (SANDFLOW_BIN: a built sandflow, else built here)
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const here = resolve(import.meta.dirname);
const repo = resolve(here, "../../..");
const bin = (name) => join(here, "node_modules", ".bin", name);
const tmp = mkdtempSync(join(tmpdir(), "sandflow-mcp-"));
const token = "sfa_inspector_test_token";
let sandflow, serve, url;

const echo = `defineWorkflowTool({
  description: "Echoes its input.",
  inputSchema: {type: "object", properties: {msg: {type: "string"}}},
  async execute(input) { "use workflow"; return input; },
});`;

function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
    s.on("error", fail);
  });
}

function run(cmd, args, env = {}) {
  return execFileSync(cmd, args, { encoding: "utf8", env: { ...process.env, ...env }, timeout: 60_000, stdio: ["ignore", "pipe", "pipe"] });
}

before(async () => {
  sandflow = process.env.SANDFLOW_BIN || join(tmp, "sandflow");
  if (!process.env.SANDFLOW_BIN) {
    execFileSync("go", ["build", "-o", sandflow, "./cmd/sandflow"], { cwd: repo, stdio: "inherit" });
  }
  const data = join(tmp, "data");
  writeFileSync(join(tmp, "echo.js"), echo);
  run(sandflow, ["--data", data, "plugin", "add", join(repo, "examples/js/approve-deadline.js")]);
  run(sandflow, ["--data", data, "plugin", "add", join(tmp, "echo.js")]);
  const port = await freePort();
  url = `http://127.0.0.1:${port}/mcp`;
  serve = spawn(sandflow, ["--data", data, "serve", "--addr", `127.0.0.1:${port}`], {
    env: { ...process.env, SANDFLOW_API_TOKEN: token, SANDFLOW_ADMIN_TOKEN: token + "_admin" },
    stdio: ["ignore", "ignore", "pipe"],
  });
  await new Promise((ok, fail) => {
    let log = "";
    const timer = setTimeout(() => fail(new Error("serve did not start: " + log)), 30_000);
    serve.stderr.on("data", (d) => {
      log += d;
      if (log.includes("msg=serving")) {
        clearTimeout(timer);
        ok();
      }
    });
    serve.on("exit", (code) => fail(new Error(`serve exited ${code}: ${log}`)));
  });
});

after(() => {
  serve?.kill("SIGTERM");
  rmSync(tmp, { recursive: true, force: true });
});

test("the Inspector CLI lists the tools and calls one", () => {
  const auth = ["--header", `Authorization: Bearer ${token}`];
  const list = JSON.parse(run(bin("inspector"), ["--cli", url, ...auth, "--method", "tools/list"]));
  const names = list.tools.map((t) => t.name).sort();
  assert.deepEqual(names, ["approve-deadline", "echo", "task_cancel", "task_wait"]);
  const echoTool = list.tools.find((t) => t.name === "echo");
  assert.equal(echoTool.inputSchema.properties.msg.type, "string");
  const res = JSON.parse(run(bin("inspector"), ["--cli", url, ...auth, "--method", "tools/call", "--tool-name", "echo", "--tool-arg", "msg=hello"]));
  assert.deepEqual(res.structuredContent, { msg: "hello" });
  assert.notEqual(res.isError, true);
});

test("the Inspector CLI is refused with a wrong token", () => {
  assert.throws(
    () => run(bin("inspector"), ["--cli", url, "--header", "Authorization: Bearer wrong-token", "--method", "tools/list"]),
    // A 401 with a bearer challenge: the client says it needs to sign in.
    (e) => `${e.stdout}${e.stderr}`.includes('"code":"auth_required"'),
  );
});

for (const era of ["legacy", "modern"]) {
  test(`mcpdo completes a task with its question answered (${era} era)`, () => {
    const home = join(tmp, `home-${era}`);
    const catalog = join(tmp, `catalog-${era}.json`);
    const env = { HOME: home, MCP_CATALOG_PATH: catalog, MCP_INSPECTOR_SECRET_STORE: "file", MCP_ALLOW_DEFAULT_CONNECTION: "0" };
    writeFileSync(catalog, JSON.stringify({ mcpServers: { sf: { type: "streamable-http", url, headers: { Authorization: `Bearer ${token}` } } } }));
    // A daemon of this test's own, gated by a token.
    for (const line of run(bin("mcpdo"), ["private"], env).split("\n")) {
      const m = line.match(/^export (\w+)='([^']*)'$/);
      if (m) env[m[1]] = m[2];
    }
    assert.ok(env.MCP_INSPECTOR_DAEMON_DIR, "mcpdo private gave no daemon");
    try {
      const conn = JSON.parse(run(bin("mcpdo"), ["--format", "json", "connect", "sf", "--era", era], env));
      assert.equal(conn.protocolEra, era);
      const args = ["--format", "json", "@sf", "tools/call", "approve-deadline", "service:=web"];
      if (era === "legacy") args.push("--task"); // on modern the server decides
      const pending = JSON.parse(run(bin("mcpdo"), args, env)).elicitationPending;
      assert.ok(pending, "no elicitation for the task's question");
      assert.match(pending.message, /^Deploy web\?/);
      assert.deepEqual(pending.requestedSchema.properties.answer.oneOf, [
        { const: "approve", title: "Deploy" },
        { const: "cancel", title: "Cancel" },
      ]);
      const res = JSON.parse(run(bin("mcpdo"), ["--format", "json", "@sf", "elicitation/respond", pending.elicitationId, "answer:=approve"], env));
      assert.equal(res.structuredContent.deployed, true);
      assert.match(res.structuredContent.url, /^https:\/\/web\./);
    } finally {
      try {
        run(bin("mcpdo"), ["daemon", "stop"], env);
      } catch {}
    }
  });
}
