#!/usr/bin/env node
// The line protocol of spec/conformance/PROTOCOL.md over core.mjs: one JSON request per line
// on stdin, one JSON response per line on stdout. Run it with `spectally conform node conform.mjs`.
import { createInterface } from "node:readline";
import { count, Inadmissible } from "./core.mjs";

const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of rl) {
  if (line.trim() === "") continue;
  const request = JSON.parse(line);
  let response;
  try {
    response = { id: request.id, ...count(request.input) };
  } catch (err) {
    if (!(err instanceof Inadmissible)) throw err;
    response = { id: request.id, error: err.rule, message: err.message };
  }
  process.stdout.write(JSON.stringify(response) + "\n");
}
