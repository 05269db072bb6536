#!/usr/bin/env node
// node-allowlist is an example kvd authorizer plugin in Node.js (see
// docs/plugins.md, "Writing a plugin in another language"). It allows a
// request only when every key and range it touches lies under one of the
// prefixes listed, comma-separated, in KVD_ALLOWLIST; callers holding the
// root role are exempt. Like every authorizer it only vetoes: kvd's roles
// still apply to what it allows.
//
// It speaks HashiCorp go-plugin's protocol directly: check the magic cookie
// and the offered protocol versions, serve gRPC on 127.0.0.1 (the
// kvd.authplugin.v1.Authorizer service, grpc.health.v1.Health with
// "plugin" SERVING, and optionally plugin.GRPCController), then print the
// handshake line "1|1|tcp|127.0.0.1:PORT|grpc" on stdout.
//
// Environment:
//   KVD_ALLOWLIST         comma-separated key prefixes, e.g. "/app/,/public/" (required)
//   KVD_AUTHPLUGIN_PROTO  path of authplugin.proto (default: the repository's
//                         proto/authplugin/v1/authplugin.proto, found from this file)
'use strict';

const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

// What kvd and its plugins agree on (pkg/pluginsdk/handshake.go).
const COOKIE_KEY = 'KVD_AUTH_PLUGIN';
const COOKIE_VALUE = '8c1f0b8e6a4d4f1a9d3e2b7c5a6f0e41';
const CORE_PROTOCOL_VERSION = 1; // go-plugin's own protocol
const APP_PROTOCOL_VERSION = 1; // kvd's plugin protocol

// log writes one line in hclog's JSON format to stderr: kvd logs it under
// the plugin's name, at its level (trace, debug, info, warn, error). stdout
// carries only the handshake line.
function log(level, message, fields = {}) {
  // hclog's timestamp has microseconds; another format makes kvd take the
  // line for plain text.
  const ts = new Date().toISOString().replace('Z', '000Z');
  process.stderr.write(JSON.stringify({ '@level': level, '@message': message, '@timestamp': ts, ...fields }) + '\n');
}

function fail(message) {
  // Before the handshake line: kvd logs this under the plugin's name and
  // refuses to start.
  process.stderr.write(`node-allowlist: ${message}\n`);
  process.exit(1);
}

if (process.env[COOKIE_KEY] !== COOKIE_VALUE) {
  fail('this is a kvd auth plugin: kvd starts it from its config (auth-plugins), it is not run by hand');
}
const offered = (process.env.PLUGIN_PROTOCOL_VERSIONS || String(APP_PROTOCOL_VERSION)).split(',');
if (!offered.includes(String(APP_PROTOCOL_VERSION))) {
  fail(`kvd offers plugin protocol versions ${offered.join(',')}; this plugin speaks ${APP_PROTOCOL_VERSION}`);
}

const prefixes = (process.env.KVD_ALLOWLIST || '')
  .split(',')
  .filter((p) => p !== '')
  .map((p) => ({ start: Buffer.from(p), end: prefixEnd(Buffer.from(p)) }));
if (prefixes.length === 0) {
  fail('KVD_ALLOWLIST is empty: list the allowed key prefixes, comma-separated');
}

// prefixEnd is the first key after every key that starts with p (etcd's
// --prefix range end), or null when there is none (p is all 0xff).
function prefixEnd(p) {
  const end = Buffer.from(p);
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i] < 0xff) {
      end[i]++;
      return end.subarray(0, i + 1);
    }
  }
  return null;
}

// within tells whether the access (one key when range_end is empty, else
// [key, range_end), "\0" meaning to the end of the keyspace) lies under p.
function within(a, p) {
  const below = (k) => p.end === null || Buffer.compare(k, p.end) < 0;
  if (Buffer.compare(a.key, p.start) < 0 || !below(a.key)) {
    return false;
  }
  if (a.range_end.length === 0) {
    return true;
  }
  if (a.range_end.length === 1 && a.range_end[0] === 0) {
    return p.end === null;
  }
  return p.end === null || Buffer.compare(a.range_end, p.end) <= 0;
}

function describe(a) {
  if (a.range_end.length === 0) {
    return `key ${JSON.stringify(a.key.toString())}`;
  }
  return `range [${JSON.stringify(a.key.toString())}, ${JSON.stringify(a.range_end.toString())})`;
}

// authorize answers kvd's Authorize: any access outside every prefix is a
// deny, whose reason kvd logs (the client sees "permission denied").
// kvd's probe at start is an empty request: no accesses, an allow.
function authorize(call, callback) {
  const { identity, accesses } = call.request;
  if (identity && identity.roles.includes('root')) {
    callback(null, { verdict: 'VERDICT_ALLOW' });
    return;
  }
  for (const a of accesses) {
    if (a.access !== 'ACCESS_READ' && a.access !== 'ACCESS_WRITE') {
      callback(null, { verdict: 'VERDICT_DENY', reason: 'access of unknown kind' });
      return;
    }
    if (!prefixes.some((p) => within(a, p))) {
      const reason = `${describe(a)} is under none of ${JSON.stringify(process.env.KVD_ALLOWLIST)}`;
      callback(null, { verdict: 'VERDICT_DENY', reason });
      return;
    }
  }
  callback(null, { verdict: 'VERDICT_ALLOW' });
}

const loadOptions = { keepCase: true, enums: String, longs: String, defaults: true, oneofs: true };
const protoFile =
  process.env.KVD_AUTHPLUGIN_PROTO || path.join(__dirname, '..', '..', '..', 'proto', 'authplugin', 'v1', 'authplugin.proto');
const authplugin = grpc.loadPackageDefinition(protoLoader.loadSync(protoFile, loadOptions)).kvd.authplugin.v1;
const health = grpc.loadPackageDefinition(protoLoader.loadSync(path.join(__dirname, 'health.proto'), loadOptions)).grpc.health.v1;
const controller = grpc.loadPackageDefinition(protoLoader.loadSync(path.join(__dirname, 'controller.proto'), loadOptions)).plugin;

const server = new grpc.Server();
server.addService(authplugin.Authorizer.service, { Authorize: authorize });
// go-plugin's health check: kvd asks for the service "plugin" at start and
// every 2 s, and restarts a plugin that fails three in a row.
server.addService(health.Health.service, {
  Check(call, callback) {
    const service = call.request.service;
    if (service === '' || service === 'plugin') {
      callback(null, { status: 'SERVING' });
    } else {
      callback({ code: grpc.status.NOT_FOUND, details: `unknown service ${service}` });
    }
  },
});
// kvd calls Shutdown when it stops the plugin: exit at once rather than be
// killed 2 s later.
server.addService(controller.GRPCController.service, {
  Shutdown(call, callback) {
    callback(null, {});
    setImmediate(() => {
      server.tryShutdown(() => process.exit(0));
      setTimeout(() => process.exit(0), 500).unref();
    });
  },
});

// A Ctrl-C in kvd's terminal reaches the plugin too: ignore it, as Go
// plugins do, and let kvd stop the plugin when it stops.
process.on('SIGINT', () => {});
// Should kvd die without stopping the plugin, do not linger.
const parent = process.ppid;
setInterval(() => {
  if (process.ppid !== parent) {
    process.exit(0);
  }
}, 1000).unref();

server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, port) => {
  if (err) {
    fail(`cannot listen: ${err.message}`);
  }
  log('info', 'serving', { prefixes: process.env.KVD_ALLOWLIST });
  // The handshake: CORE|APP|NETWORK|ADDRESS|PROTOCOL, one line on stdout.
  process.stdout.write(`${CORE_PROTOCOL_VERSION}|${APP_PROTOCOL_VERSION}|tcp|127.0.0.1:${port}|grpc\n`);
});
