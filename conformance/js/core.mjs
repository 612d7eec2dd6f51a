// The core counting rules of spec/CORE.md, written from CORE.md and the core vectors alone:
// an implementation independent of the Python reference. Plain ES modules, no dependency.

/** @typedef {{drafted: number[], verified: number[], accepted: number[]}} PerPosition */
/** @typedef {{drafted: number[], accepted: number[]}} PerDepth */

export class Inadmissible extends Error {
  /** @param {string} rule  @param {string} message */
  constructor(rule, message) {
    super(message);
    this.rule = rule;
  }
}

/** @param {number} kMax */
export function zeroCounters(kMax) {
  const zeros = () => new Array(kMax).fill(0);
  return {
    drafted: 0, verified: 0, accepted: 0, spec_steps: 0, zero_draft_steps: 0, filler: 0,
    fates: { accepted: 0, rejected: 0, unverified: 0 },
    per_position: { drafted: zeros(), verified: zeros(), accepted: zeros() },
    per_depth: { drafted: zeros(), accepted: zeros() },
    has_tree: false,
  };
}

/** @param {unknown} x */
const isCount = (x) => typeof x === "number" && Number.isInteger(x) && x >= 0;

/**
 * C-A1..C-A4: refuse an inadmissible step, never count it.
 * @param {any} step  @param {number} kMax
 */
export function checkStep(step, kMax) {
  const isTree = Array.isArray(step.tree);
  const counts = isTree ? [...step.tree, step.verified, step.accepted] : [step.proposed, step.verified, step.accepted];
  if (step.filler !== undefined) counts.push(step.filler);
  if (!counts.every(isCount)) throw new Inadmissible("C-A1", "a count is not a non-negative integer");
  let drafted;
  if (isTree) {
    drafted = step.tree.reduce((s, n) => s + n, 0);
    const depth = step.tree.length;
    if (step.tree.some((n) => n === 0)) throw new Inadmissible("C-A3", "a tree depth with no node");
    if (depth > kMax) throw new Inadmissible("C-A3", `tree depth ${depth} over k_max ${kMax}`);
    if (step.accepted > depth) throw new Inadmissible("C-A3", "accepted path deeper than the tree");
  } else {
    drafted = step.proposed;
    if (drafted > kMax) throw new Inadmissible("C-A2", `${drafted} proposed over k_max ${kMax}`);
  }
  if (!(step.accepted <= step.verified && step.verified <= drafted)) {
    throw new Inadmissible("C-A2", "need accepted <= verified <= drafted");
  }
  if ((step.filler ?? 0) > drafted) throw new Inadmissible("C-A4", "more filler than drafted");
  return drafted;
}

/**
 * Add one step of one sequence to the counters (C-Q1..C-Q6, C-S1..C-S3, C-P1, C-F1).
 * @param {ReturnType<typeof zeroCounters>} c  @param {any} step  @param {number} kMax
 */
export function addStep(c, step, kMax) {
  const drafted = checkStep(step, kMax);
  if (Array.isArray(step.tree)) c.has_tree = true; // C-P1: even an empty or discarded tree step
  if (step.applied === false) return; // C-Q6: a step never applied counts nothing
  if (drafted === 0) {
    c.zero_draft_steps += 1; // C-S1: not a spec step, but visible
    return;
  }
  c.drafted += drafted;
  c.verified += step.verified;
  c.accepted += step.accepted;
  c.spec_steps += 1;
  c.filler += step.filler ?? 0;
  c.fates.accepted += step.accepted;
  c.fates.rejected += step.verified - step.accepted;
  c.fates.unverified += drafted - step.verified;
  const nodesPerDepth = Array.isArray(step.tree) ? step.tree : new Array(step.proposed).fill(1);
  for (let d = 0; d < kMax; d++) {
    c.per_depth.drafted[d] += nodesPerDepth[d] ?? 0;
    if (step.accepted > d) c.per_depth.accepted[d] += 1;
    if (!Array.isArray(step.tree)) {
      if (step.proposed > d) c.per_position.drafted[d] += 1;
      if (step.verified > d) c.per_position.verified[d] += 1;
      if (step.accepted > d) c.per_position.accepted[d] += 1;
    }
  }
}

/** @param {ReturnType<typeof zeroCounters>} a  @param {ReturnType<typeof zeroCounters>} b */
export function merge(a, b) {
  const out = zeroCounters(a.per_depth.drafted.length);
  for (const k of ["drafted", "verified", "accepted", "spec_steps", "zero_draft_steps", "filler"]) {
    out[k] = a[k] + b[k];
  }
  for (const k of ["accepted", "rejected", "unverified"]) out.fates[k] = a.fates[k] + b.fates[k];
  for (const k of ["drafted", "verified", "accepted"]) {
    out.per_position[k] = a.per_position[k].map((x, i) => x + b.per_position[k][i]);
  }
  for (const k of ["drafted", "accepted"]) {
    out.per_depth[k] = a.per_depth[k].map((x, i) => x + b.per_depth[k][i]);
  }
  out.has_tree = a.has_tree || b.has_tree;
  return out;
}

/** C-M1..C-M4: a ratio over zero is undefined (null). @param {number} n @param {number} d */
const ratio = (n, d) => (d === 0 ? null : n / d);

/** The exported view: counters plus derived metrics. @param {ReturnType<typeof zeroCounters>} c */
export function view(c) {
  const out = {
    drafted: c.drafted, verified: c.verified, accepted: c.accepted, spec_steps: c.spec_steps,
    zero_draft_steps: c.zero_draft_steps, filler: c.filler, fates: c.fates, per_depth: c.per_depth,
    acceptance_rate: ratio(c.accepted, c.drafted),
    mean_acceptance_length: c.spec_steps === 0 ? 1.0 : 1 + c.accepted / c.spec_steps,
    draft_quality: ratio(c.accepted, c.verified),
    verification_rate: ratio(c.verified, c.drafted),
  };
  if (!c.has_tree) {
    // C-P1: per position is defined for chain steps only
    out.per_position = c.per_position;
    out.per_position_acceptance_rate = c.per_position.accepted.map((a) => ratio(a, c.spec_steps));
  }
  return out;
}

/** One vector input -> totals and per-request counters (C-S4: sums over sequences). @param {any} input */
export function count(input) {
  const kMax = input.k_max;
  let totals = zeroCounters(kMax);
  const requests = {};
  for (const req of input.requests) {
    let rc = zeroCounters(kMax);
    for (const seq of req.sequences) {
      const sc = zeroCounters(kMax);
      for (const step of seq) addStep(sc, step, kMax);
      rc = merge(rc, sc);
    }
    requests[req.id] = view(rc);
    totals = merge(totals, rc);
  }
  return { totals: view(totals), requests };
}
