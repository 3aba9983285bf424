// A PLC stand-in on node-opcua (not asyncua), for rl2edge's tests and benchmarks.
//
// It lays its nodes out as an S7-1500 / Codesys PLC exposes a data block: an Object `RL` in the server's
// own namespace with typed scalar variables (or arrays, by option; or, for a Dict observation, one array
// per sensor key `Obs_<key>`, a scalar for a one-value key, as a data block declares `Lidar : ARRAY[0..23]
// OF REAL` next to `Speed : REAL`). The plant itself (a Gymnasium env)
// lives in Python: tests/standin_plc.py drives this process over stdin/stdout, one JSON object a line.
//
//   node server.mjs '{"port": 4841, "obs_dim": 4, "act_dim": 1}'
//
// stdout carries the protocol only (ready / step / reply events); every log line goes to stderr.
// Config keys, commands and events: see tests/standin_plc.py, which documents them for its callers.

import { X509Certificate } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";

// ------------------------------------------------------------------------------------ stdout hygiene
// node-opcua logs with console.log (to stdout), some of it at import time (e.g. NODE-OPCUA-W27 on
// Node 20). Keep stdout for the protocol: point everything else at stderr before node-opcua loads.
const protocolWrite = process.stdout.write.bind(process.stdout);
process.stdout.write = process.stderr.write.bind(process.stderr);
for (const level of ["log", "info", "debug", "warn", "trace"]) {
    console[level] = (...args) => console.error(...args);
}

function toJson(obj) {
    // BigInt (Int64/UInt64 values) as plain JSON numbers, exact: Python's json reads them as ints.
    const marker = "\u0000bigint:";
    const text = JSON.stringify(obj, (_key, value) => (typeof value === "bigint" ? marker + value.toString() : value));
    return text.replace(/"\\u0000bigint:(-?\d+)"/g, "$1");
}

function emit(obj) {
    protocolWrite(toJson(obj) + "\n");
}

function log(...args) {
    console.error("[standin]", ...args);
}

let tempPkiDir = null; // removed at exit when this process made it

function fail(message, code = 2) {
    log(`error: ${message}`);
    if (tempPkiDir) fs.rmSync(tempPkiDir, { recursive: true, force: true });
    process.exit(code);
}

// -------------------------------------------------------------------------------------------- config
const DEFAULT_TYPES = {
    Obs: "Float",
    ObsSeq: "Int32",
    Act: "Int16",
    ActSeq: "Int32",
    Heartbeat: "UInt16",
    Status: "Int16",
    EpisodeStart: "Boolean" // set with an episode's first observation (`observe` with episode_start)
};
const KINDS = Object.keys(DEFAULT_TYPES);
const CONFIG_KEYS = new Set([
    "host",
    "port",
    "namespace_uri",
    "extra_namespaces",
    "layout",
    "obs_dim",
    "obs_keys",
    "act_dim",
    "types",
    "initial",
    "min_publishing_interval_ms",
    "min_sampling_interval_ms",
    "security",
    "certificate",
    "private_key",
    "trusted",
    "pki_dir",
    "application_uri"
]);

// The integer range of each builtin type this stand-in supports; Float/Double/Boolean are special.
const INT_RANGES = {
    SByte: [-(2n ** 7n), 2n ** 7n - 1n],
    Byte: [0n, 2n ** 8n - 1n],
    Int16: [-(2n ** 15n), 2n ** 15n - 1n],
    UInt16: [0n, 2n ** 16n - 1n],
    Int32: [-(2n ** 31n), 2n ** 31n - 1n],
    UInt32: [0n, 2n ** 32n - 1n],
    Int64: [-(2n ** 63n), 2n ** 63n - 1n],
    UInt64: [0n, 2n ** 64n - 1n]
};
// Float/Double as a sequence counter: up to the largest contiguous integer, then like a signed integer.
const FLOAT_SEQ_RANGES = { Float: [-(2 ** 24), 2 ** 24], Double: [-(2 ** 53), 2 ** 53] };
const TYPE_NAMES = [...Object.keys(INT_RANGES), "Float", "Double", "Boolean"];

let cfg;
try {
    cfg = JSON.parse(process.argv[2] ?? "");
} catch (err) {
    fail(`the one argument must be the JSON config (${err.message})`);
}
if (typeof cfg !== "object" || cfg === null || Array.isArray(cfg)) fail("the config must be a JSON object");
for (const key of Object.keys(cfg)) {
    if (!CONFIG_KEYS.has(key)) fail(`unknown config key ${JSON.stringify(key)}; known: ${[...CONFIG_KEYS].join(", ")}`);
}
cfg = {
    host: "127.0.0.1",
    namespace_uri: "urn:rl2edge:test-plc",
    extra_namespaces: 0,
    layout: "scalar",
    obs_dim: 4,
    act_dim: 1,
    initial: {},
    security: "none",
    trusted: [],
    ...cfg
};
cfg.types = { ...DEFAULT_TYPES, ...(cfg.types ?? {}) };
if (!Number.isInteger(cfg.port) || cfg.port < 0 || cfg.port > 65535) fail("config.port: an integer 0..65535 is required (0: any free port)");
if (!["scalar", "array", "keys"].includes(cfg.layout)) fail(`config.layout ${JSON.stringify(cfg.layout)}: scalar, array or keys`);
if (cfg.layout === "keys") {
    // [{name, size}, ...] in the observation's order: one node per key, its values in the concatenation's place
    const keys = cfg.obs_keys;
    if (!Array.isArray(keys) || keys.length === 0) fail("config.layout keys needs obs_keys: a list of {name, size}");
    for (const k of keys) {
        if (typeof k?.name !== "string" || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(k.name)) fail(`config.obs_keys: ${JSON.stringify(k)} needs a name (an identifier)`);
        if (!Number.isInteger(k.size) || k.size < 1) fail(`config.obs_keys: ${JSON.stringify(k)} needs a size, a positive integer`);
    }
    if (new Set(keys.map((k) => k.name)).size !== keys.length) fail("config.obs_keys: the names must be distinct");
    cfg.obs_dim = keys.reduce((n, k) => n + k.size, 0);
}
for (const key of ["obs_dim", "act_dim"]) {
    if (!Number.isInteger(cfg[key]) || cfg[key] < 1) fail(`config.${key}: a positive integer`);
}
if (!Number.isInteger(cfg.extra_namespaces) || cfg.extra_namespaces < 0) fail("config.extra_namespaces: an integer >= 0");
for (const [kind, name] of Object.entries(cfg.types)) {
    if (!KINDS.includes(kind)) fail(`config.types: unknown node kind ${JSON.stringify(kind)}; known: ${KINDS.join(", ")}`);
    if (!TYPE_NAMES.includes(name)) fail(`config.types.${kind} = ${JSON.stringify(name)}: one of ${TYPE_NAMES.join(", ")}`);
}
if (!["none", "sign", "sign_and_encrypt"].includes(cfg.security)) fail(`config.security ${JSON.stringify(cfg.security)}: none, sign or sign_and_encrypt`);
if (cfg.security !== "none" && (!cfg.certificate || !cfg.private_key)) fail(`config.security ${cfg.security} needs certificate and private_key`);
if (!Array.isArray(cfg.trusted)) fail("config.trusted: a list of certificate paths");
for (const p of [cfg.certificate, cfg.private_key, ...cfg.trusted]) {
    if (p !== undefined && p !== null && !fs.existsSync(p)) fail(`file ${p} does not exist`);
}

// ------------------------------------------------------------------------------------------ node-opcua
const opcua = await import("node-opcua");
const {
    AttributeIds,
    DataType,
    MessageSecurityMode,
    MonitoredItem,
    OPCUACertificateManager,
    OPCUAServer,
    SecurityPolicy,
    StatusCodes,
    Subscription,
    Variant,
    VariantArrayType,
    nodesets
} = opcua;

if (cfg.min_publishing_interval_ms !== undefined) Subscription.minimumPublishingInterval = cfg.min_publishing_interval_ms;
if (cfg.min_sampling_interval_ms !== undefined) MonitoredItem.minimumSamplingInterval = cfg.min_sampling_interval_ms;

// ------------------------------------------------------------------------------------------ values
function kindOf(name) {
    // Obs_3 -> Obs, Obs_lidar -> Obs, Act -> Act, ObsSeq -> ObsSeq
    if (name.startsWith("Obs_")) return "Obs";
    return name.replace(/_\d+$/, "");
}

function isInt(typeName) {
    return typeName in INT_RANGES;
}

function is64(typeName) {
    return typeName === "Int64" || typeName === "UInt64";
}

/** A JSON value (number, numeric string, boolean) -> the declared type's JS value, rounded and saturated. */
function coerceValue(typeName, value) {
    if (typeName === "Boolean") {
        if (typeof value === "string") return value !== "0" && value.toLowerCase() !== "false" && value !== "";
        return Boolean(Number(value));
    }
    if (typeName === "Float") return Math.fround(Number(value));
    if (typeName === "Double") return Number(value);
    const [lo, hi] = INT_RANGES[typeName];
    let big;
    if (typeof value === "bigint") big = value;
    else if (typeof value === "string" && /^-?\d+$/.test(value.trim())) big = BigInt(value.trim());
    else {
        const n = Number(typeof value === "boolean" ? Number(value) : value);
        if (Number.isNaN(n)) big = 0n;
        else if (n === Infinity) big = hi;
        else if (n === -Infinity) big = lo;
        else big = BigInt(Math.round(n));
    }
    if (big < lo) big = lo;
    if (big > hi) big = hi;
    return is64(typeName) ? big : Number(big);
}

/** The declared type's JS value -> what node-opcua stores in a Variant (Int64 as [high, low] uint32). */
function toOpcua(typeName, value) {
    if (!is64(typeName)) return value;
    const u = BigInt.asUintN(64, value);
    return [Number(u >> 32n), Number(u & 0xffffffffn)];
}

/** What node-opcua stored -> a JS value for JSON (BigInt for Int64/UInt64, numbers, booleans). */
function fromOpcua(typeName, value) {
    if (value === null || value === undefined) return null;
    if (is64(typeName)) {
        if (typeof value === "bigint") return value;
        if (typeof value === "number") return BigInt(value);
        const u = (BigInt(value[0] >>> 0) << 32n) | BigInt(value[1] >>> 0);
        return typeName === "Int64" ? BigInt.asIntN(64, u) : u;
    }
    return value;
}

function nextSeq(typeName, value) {
    if (typeName === "Boolean") return !value;
    if (typeName in FLOAT_SEQ_RANGES) {
        const [lo, hi] = FLOAT_SEQ_RANGES[typeName];
        const n = value + 1;
        return n > hi ? lo : typeName === "Float" ? Math.fround(n) : n;
    }
    const [lo, hi] = INT_RANGES[typeName];
    const n = BigInt(value) + 1n;
    const wrapped = n > hi ? lo : n;
    return is64(typeName) ? wrapped : Number(wrapped);
}

/** A canonical key for comparing sequence numbers of possibly different types (ActSeq vs ObsSeq). */
function seqKey(value) {
    if (typeof value === "boolean") return value ? "1" : "0";
    return String(value);
}

function statusByName(name) {
    if (name === null || name === undefined || name === "Good") return StatusCodes.Good;
    const code = typeof name === "string" ? StatusCodes[name] : undefined;
    if (!code || typeof code !== "object" || typeof code.name !== "string") throw new Error(`unknown status code name ${JSON.stringify(name)} (e.g. Good, BadSensorFailure, UncertainLastUsableValue)`);
    return code;
}

// ------------------------------------------------------------------------------------------ security
function certificateUri(certPath) {
    try {
        const san = new X509Certificate(fs.readFileSync(certPath)).subjectAltName ?? "";
        const uri = san.split(/,\s*/).find((entry) => entry.startsWith("URI:"));
        return uri ? uri.slice(4) : undefined;
    } catch (err) {
        fail(`cannot read certificate ${certPath}: ${err.message}`);
    }
}

function derOf(certPath) {
    const raw = fs.readFileSync(certPath);
    return Buffer.from(new X509Certificate(raw).raw);
}

let pkiDir = cfg.pki_dir;
if (!pkiDir) {
    pkiDir = fs.mkdtempSync(path.join(os.tmpdir(), "rl2edge-standin-pki-"));
    tempPkiDir = pkiDir;
}
fs.mkdirSync(pkiDir, { recursive: true });

// node-opcua reads its own certificate as PEM or DER; keep a PEM copy in the PKI folder either way.
let certificateFile;
let privateKeyFile;
if (cfg.certificate) {
    fs.mkdirSync(path.join(pkiDir, "own", "certs"), { recursive: true });
    certificateFile = path.join(pkiDir, "own", "certs", "standin_cert.pem");
    fs.writeFileSync(certificateFile, new X509Certificate(fs.readFileSync(cfg.certificate)).toString());
    privateKeyFile = cfg.private_key;
}
const applicationUri = cfg.application_uri ?? (cfg.certificate ? certificateUri(cfg.certificate) : undefined) ?? "urn:rl2edge:test-plc-server";

const serverCertificateManager = new OPCUACertificateManager({
    rootFolder: pkiDir,
    automaticallyAcceptUnknownCertificate: false
});
const userCertificateManager = new OPCUACertificateManager({
    rootFolder: path.join(pkiDir, "user_pki"),
    automaticallyAcceptUnknownCertificate: false
});
await serverCertificateManager.initialize();
// `trusted` is the whole truth: a PKI folder reused from an earlier run keeps no client it trusted then.
const trustedDir = path.join(pkiDir, "trusted", "certs");
for (const f of fs.existsSync(trustedDir) ? fs.readdirSync(trustedDir) : []) fs.rmSync(path.join(trustedDir, f), { force: true });
for (const p of cfg.trusted) {
    await serverCertificateManager.trustCertificate(derOf(p));
}

const securityModes = {
    none: [MessageSecurityMode.None],
    sign: [MessageSecurityMode.Sign],
    sign_and_encrypt: [MessageSecurityMode.SignAndEncrypt]
}[cfg.security];
const securityPolicies = cfg.security === "none" ? [SecurityPolicy.None] : [SecurityPolicy.Basic256Sha256];

// ------------------------------------------------------------------------------------------ server
const server = new OPCUAServer({
    port: cfg.port,
    host: cfg.host,
    hostname: cfg.host,
    nodeset_filename: [nodesets.standard],
    serverInfo: {
        applicationUri,
        productUri: "urn:rl2edge:opcua-standin",
        applicationName: { text: "rl2edge stand-in PLC (node-opcua)", locale: "en" }
    },
    buildInfo: { productName: "rl2edge stand-in PLC", manufacturerName: "rl2edge tests" },
    securityModes,
    securityPolicies,
    allowAnonymous: true,
    serverCertificateManager,
    userCertificateManager,
    certificateFile,
    privateKeyFile
});

await server.initialize();
const addressSpace = server.engine.addressSpace;
for (let i = 0; i < cfg.extra_namespaces; i++) addressSpace.registerNamespace(`urn:dummy:${i}`);
const namespace = addressSpace.registerNamespace(cfg.namespace_uri);
const ns = namespace.index;

const rl = namespace.addObject({
    browseName: "RL",
    nodeId: "s=RL",
    organizedBy: addressSpace.rootFolder.objects
});

const WRITABLE = new Set(["Act", "ActSeq", "Heartbeat", "Status"]);
const variables = new Map(); // name -> { node, typeName, dim (null for scalars) }
const byNodeId = new Map(); // "ns=..;s=RL.X" -> name

function initialFor(name, typeName) {
    const init = cfg.initial[name] ?? cfg.initial[kindOf(name)];
    return coerceValue(typeName, init ?? 0);
}

function addVar(name, dim) {
    const kind = kindOf(name);
    const typeName = cfg.types[kind];
    const writable = WRITABLE.has(kind);
    let value;
    if (dim === null) {
        value = new Variant({ dataType: DataType[typeName], arrayType: VariantArrayType.Scalar, value: toOpcua(typeName, initialFor(name, typeName)) });
    } else {
        const init = cfg.initial[name];
        const values = Array.from({ length: dim }, (_, i) => toOpcua(typeName, coerceValue(typeName, Array.isArray(init) ? (init[i] ?? 0) : (init ?? 0))));
        value = new Variant({ dataType: DataType[typeName], arrayType: VariantArrayType.Array, value: values });
    }
    const access = writable ? "CurrentRead | CurrentWrite" : "CurrentRead";
    const node = namespace.addVariable({
        componentOf: rl,
        browseName: name,
        nodeId: `s=RL.${name}`,
        dataType: typeName,
        valueRank: dim === null ? -1 : 1,
        arrayDimensions: dim === null ? null : [dim],
        accessLevel: access,
        userAccessLevel: access,
        minimumSamplingInterval: 0, // exception-based: changes are reported, not sampled
        value
    });
    variables.set(name, { node, typeName, dim });
    byNodeId.set(node.nodeId.toString(), name);
}

if (cfg.layout === "scalar") {
    for (let i = 0; i < cfg.obs_dim; i++) addVar(`Obs_${i}`, null);
    addVar("ObsSeq", null);
    for (let i = 0; i < cfg.act_dim; i++) addVar(`Act_${i}`, null);
    addVar("ActSeq", null);
} else if (cfg.layout === "keys") {
    for (const k of cfg.obs_keys) addVar(`Obs_${k.name}`, k.size === 1 ? null : k.size);
    addVar("ObsSeq", null);
    addVar("Act", cfg.act_dim);
    addVar("ActSeq", null);
} else {
    addVar("Obs", cfg.obs_dim);
    addVar("ObsSeq", null);
    addVar("Act", cfg.act_dim);
    addVar("ActSeq", null);
}
addVar("Heartbeat", null);
addVar("Status", null);
addVar("EpisodeStart", null);

function readJs(name) {
    const { node, typeName, dim } = variables.get(name);
    const v = node.readValue().value.value;
    if (dim === null) return fromOpcua(typeName, v);
    return Array.from(v ?? [], (x) => fromOpcua(typeName, x));
}

function writeLocal(name, jsValue, statusCode) {
    // The PLC program's own write (not a client's): setValueFromSource, which subscribers see.
    const { node, typeName, dim } = variables.get(name);
    let variant;
    if (dim === null) {
        if (Array.isArray(jsValue)) throw new Error(`${name} is a scalar; got a list`);
        variant = new Variant({ dataType: DataType[typeName], arrayType: VariantArrayType.Scalar, value: toOpcua(typeName, coerceValue(typeName, jsValue)) });
    } else {
        if (!Array.isArray(jsValue) || jsValue.length !== dim) throw new Error(`${name} needs a list of ${dim} values`);
        variant = new Variant({
            dataType: DataType[typeName],
            arrayType: VariantArrayType.Array,
            value: jsValue.map((x) => toOpcua(typeName, coerceValue(typeName, x)))
        });
    }
    node.setValueFromSource(variant, statusCode ?? StatusCodes.Good);
}

function actValues() {
    if (cfg.layout !== "scalar") return readJs("Act");
    return Array.from({ length: cfg.act_dim }, (_, i) => readJs(`Act_${i}`));
}

// ------------------------------------------------------------------------------------------ plant handshake
const rejects = new Map(); // name -> StatusCode
// writes.accepted: {name: count} of the client writes each variable took (a wrapped counter's value alone
// cannot tell how many times it moved).
const stats = { writes: { ok: 0, rejected: 0, accepted: {} }, steps: 0, revisedPublishingIntervals: [] };
let armed = false; // an observation is published and has not been answered yet

function checkHandshake() {
    if (!armed) return;
    if (seqKey(readJs("ActSeq")) !== seqKey(readJs("ObsSeq"))) return;
    armed = false;
    stats.steps += 1;
    emit({ event: "step", seq: readJs("ObsSeq"), action: actValues() });
}

function shapeOk(name, writeValue) {
    // node-opcua checks the DataType of a written Variant but not its shape (ValueRank/ArrayDimensions):
    // refuse a shape a PLC would refuse, with the status node-opcua gives a wrong DataType.
    const { dim } = variables.get(name);
    const variant = writeValue.value?.value;
    if (!variant) return true;
    const hasRange = Boolean(writeValue.indexRange?.isDefined());
    if (dim === null) return variant.arrayType === VariantArrayType.Scalar && !hasRange;
    if (variant.arrayType !== VariantArrayType.Array) return false;
    return hasRange || (variant.value?.length ?? 0) === dim;
}

const engine = server.engine;
const engineWrite = engine.write.bind(engine);
engine.write = async (context, nodesToWrite) => {
    const results = new Array(nodesToWrite.length);
    const passed = [];
    const passedIndex = [];
    nodesToWrite.forEach((w, i) => {
        const name = byNodeId.get(w.nodeId.toString());
        if (name !== undefined && w.attributeId === AttributeIds.Value) {
            if (rejects.has(name)) {
                results[i] = rejects.get(name);
                return;
            }
            if (WRITABLE.has(kindOf(name)) && !shapeOk(name, w)) {
                results[i] = StatusCodes.BadTypeMismatch;
                return;
            }
        }
        passed.push(w);
        passedIndex.push(i);
    });
    const applied = passed.length ? await engineWrite(context, passed) : [];
    applied.forEach((status, j) => {
        results[passedIndex[j]] = status;
    });
    let actSeqWritten = false;
    nodesToWrite.forEach((w, i) => {
        const good = results[i].isGood();
        if (good) stats.writes.ok += 1;
        else stats.writes.rejected += 1;
        const written = byNodeId.get(w.nodeId.toString());
        if (good && written !== undefined && w.attributeId === AttributeIds.Value) {
            stats.writes.accepted[written] = (stats.writes.accepted[written] ?? 0) + 1;
        }
        if (good && w.attributeId === AttributeIds.Value && byNodeId.get(w.nodeId.toString()) === "ActSeq") actSeqWritten = true;
    });
    if (actSeqWritten) checkHandshake();
    return results;
};

server.on("response", (response) => {
    const kind = response?.schema?.name ?? response?.constructor?.name;
    // One entry per subscription created (asyncua follows a revised CreateSubscription with a
    // ModifySubscription of the keep-alive/lifetime counts; that one is not recorded).
    if (kind === "CreateSubscriptionResponse" && response.responseHeader?.serviceResult?.isGood?.()) {
        stats.revisedPublishingIntervals.push(response.revisedPublishingInterval);
    }
});

function monitoredItemCount() {
    let n = 0;
    for (const session of engine.getSessions()) {
        for (const sub of session.publishEngine?.subscriptions ?? []) n += sub.monitoredItemCount;
    }
    return n;
}

// ------------------------------------------------------------------------------------------ commands
function requireNode(name) {
    if (!variables.has(name)) throw new Error(`unknown node ${JSON.stringify(name)}; known: ${[...variables.keys()].join(", ")}`);
    return variables.get(name);
}

const commands = {
    observe(msg) {
        const obs = msg.obs;
        if (!Array.isArray(obs) || obs.length !== cfg.obs_dim) throw new Error(`observe needs obs: a list of ${cfg.obs_dim} values`);
        if (cfg.layout === "array") writeLocal("Obs", obs);
        else if (cfg.layout === "keys") {
            let start = 0;
            for (const k of cfg.obs_keys) {
                const values = obs.slice(start, start + k.size);
                writeLocal(`Obs_${k.name}`, k.size === 1 ? values[0] : values);
                start += k.size;
            }
        } else obs.forEach((x, i) => writeLocal(`Obs_${i}`, x));
        // as a PLC program: the flag with the observation, before the sequence number that announces both
        if (msg.episode_start !== undefined) writeLocal("EpisodeStart", coerceValue(cfg.types.EpisodeStart, msg.episode_start));
        const seq = nextSeq(cfg.types.ObsSeq, readJs("ObsSeq"));
        writeLocal("ObsSeq", seq);
        armed = true;
        return readJs("ObsSeq");
    },
    set(msg) {
        const { node } = requireNode(msg.node);
        const status = statusByName(msg.status ?? "Good");
        const before = seqKey(readJs(msg.node));
        if (msg.value === undefined || msg.value === null) {
            const variant = node.readValue().value;
            node.setValueFromSource(variant, status);
        } else {
            writeLocal(msg.node, msg.value, status);
        }
        // A new ObsSeq set by hand is a new observation to answer, as after `observe`.
        if (msg.node === "ObsSeq" && seqKey(readJs("ObsSeq")) !== before) armed = true;
        return readJs(msg.node);
    },
    reject(msg) {
        requireNode(msg.node);
        if (msg.status === null || msg.status === undefined) rejects.delete(msg.node);
        else {
            const code = statusByName(msg.status);
            if (code.isGood()) throw new Error("reject needs a Bad or Uncertain status (null clears)");
            rejects.set(msg.node, code);
        }
        return null;
    },
    get() {
        const out = {};
        for (const name of variables.keys()) out[name] = readJs(name);
        return out;
    },
    stats() {
        return {
            sessions: server.currentSessionCount,
            subscriptions: server.currentSubscriptionCount,
            monitored_items: monitoredItemCount(),
            revised_publishing_intervals: stats.revisedPublishingIntervals,
            writes: stats.writes,
            steps: stats.steps
        };
    },
    async stop() {
        setImmediate(() => shutdown(0));
        return null;
    }
};

let stopping = false;
async function shutdown(code) {
    if (stopping) return;
    stopping = true;
    setTimeout(() => process.exit(code), 3000).unref();
    try {
        // Cut the clients first, as a PLC powering down does; then stop listening.
        for (const endpoint of server.endpoints) {
            await new Promise((resolve) => endpoint.killClientSockets(() => resolve()));
        }
        await server.shutdown(0);
    } catch (err) {
        log(`shutdown: ${err.message}`);
    }
    if (tempPkiDir) fs.rmSync(tempPkiDir, { recursive: true, force: true });
    process.exit(code);
}

process.stdout.on("error", () => shutdown(0)); // EPIPE: the parent stopped reading, it is gone
process.on("SIGTERM", () => shutdown(0));
process.on("SIGINT", () => shutdown(0));

// ------------------------------------------------------------------------------------------ start
try {
    await server.start();
} catch (err) {
    fail(`cannot start the OPC UA server on ${cfg.host}:${cfg.port}: ${err.message}`, 3);
}
const port = server.endpoints[0].port;
const endpoint = `opc.tcp://${cfg.host}:${port}`;
log(`listening on ${endpoint} (${cfg.security}, namespace ${ns} = ${cfg.namespace_uri}, layout ${cfg.layout}, node-opcua minimum publishing interval ${Subscription.minimumPublishingInterval} ms)`);

const rlInput = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
rlInput.on("line", async (line) => {
    if (!line.trim()) return;
    let msg;
    try {
        msg = JSON.parse(line);
    } catch (err) {
        emit({ event: "reply", id: null, error: `bad JSON: ${err.message}` });
        return;
    }
    const handler = Object.hasOwn(commands, msg.cmd) ? commands[msg.cmd] : undefined;
    if (!handler) {
        emit({ event: "reply", id: msg.id ?? null, error: `unknown cmd ${JSON.stringify(msg.cmd)}; known: ${Object.keys(commands).join(", ")}` });
        return;
    }
    try {
        const result = await handler(msg);
        emit({ event: "reply", id: msg.id ?? null, result });
    } catch (err) {
        emit({ event: "reply", id: msg.id ?? null, error: err.message });
    }
});
// stdin closed: the parent is gone. Never outlive it.
rlInput.on("close", () => shutdown(0));

emit({ event: "ready", endpoint, namespace_index: ns, namespace_uri: cfg.namespace_uri });
