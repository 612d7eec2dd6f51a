// Parse every ```mermaid block of a Markdown file with Mermaid's own parser (the one GitHub's
// renderer uses), so a diagram that would not render fails here. Exit 1 on any bad block.
//
//   npm install --prefix DIR mermaid jsdom        # once, outside the repository
//   cd DIR && node --input-type=module - FILE.md < REPO/scripts/check_mermaid.mjs
//
// (read from stdin so that `mermaid` and `jsdom` resolve from DIR). tests/test_spec_docs.py
// runs it when SPECTALLY_MERMAID_DIR names such a DIR. jsdom stands in for the browser DOM
// that Mermaid's sanitiser expects.
import { JSDOM } from 'jsdom';
import fs from 'fs';
const dom = new JSDOM('<!doctype html><html><body></body></html>');
globalThis.window = dom.window; globalThis.document = dom.window.document;
try { globalThis.navigator = dom.window.navigator; } catch (e) {}
globalThis.DOMParser = dom.window.DOMParser; globalThis.Element = dom.window.Element;
const mermaid = (await import('mermaid')).default;
mermaid.initialize({ startOnLoad: false });
const text = fs.readFileSync(process.argv[2], 'utf8');
const blocks = [...text.matchAll(/```mermaid\n([\s\S]*?)```/g)].map(m => m[1]);
let bad = 0;
for (const [i, b] of blocks.entries()) {
  try { const r = await mermaid.parse(b); console.log(`block ${i}: ok`, r && r.diagramType); }
  catch (e) { bad++; console.log(`block ${i}: ERROR`, String(e.message || e).slice(0, 400)); }
}
console.log(`${blocks.length} blocks, ${bad} bad`);
process.exit(bad ? 1 : 0);
