// A step's proof, checked in the browser with the published verifier's
// modules: the leaf of the step's log entry (FORMAT.md 5.3), its RFC 9162
// inclusion proof up to the checkpoint's root, and the checkpoint's Ed25519
// signature by the log's key (C2SP signed note). Nothing is taken on trust
// from the page but the key, which is shown for comparison.
import { frame, fromHex, u64be, utf8 } from "./verifier/bytes.js";
import { leafHash, verifyInclusion } from "./verifier/merkle.js";
import { openNote, parseCheckpoint, parseVkey } from "./verifier/note.js";

const box = document.getElementById("proof-result");
const data = box.dataset;

function say(ok, title, detail) {
  box.replaceChildren();
  box.className = ok ? "verdict good" : "verdict bad";
  const h = document.createElement("h2");
  h.textContent = title;
  const p = document.createElement("p");
  p.textContent = detail;
  box.append(h, p);
}

try {
  const keys = [];
  for (const vkey of data.keys.split(" ").filter((k) => k.length > 0)) keys.push(await parseVkey(vkey));
  const text = await openNote(data.checkpoint, keys);
  const checkpoint = parseCheckpoint(text);
  if (checkpoint.origin !== data.origin) throw new Error(`the checkpoint is of ${checkpoint.origin}, not ${data.origin}`);
  const chainHash = fromHex(data.chainHash, 32);
  if (chainHash === undefined) throw new Error("the chain hash is not 32 bytes of hex");
  const seq = BigInt(data.seq);
  const leaf = await leafHash(frame("cairn/v2/log-leaf", u64be(seq), utf8("step"), chainHash, utf8(data.loggedAt)));
  const proof = data.proof.split(" ").filter((h) => h.length > 0).map((h) => fromHex(h, 32));
  if (proof.some((h) => h === undefined)) throw new Error("a proof hash is not 32 bytes of hex");
  const included = await verifyInclusion(leaf, seq, checkpoint.size, proof, checkpoint.root);
  if (included) {
    say(true, "Proof checked in your browser",
      `The step is entry ${seq} of the log whose signed checkpoint of size ${checkpoint.size} your browser verified.`);
  } else {
    say(false, "The proof does not verify", "The inclusion proof does not lead from this step's leaf to the checkpoint's root.");
  }
} catch (e) {
  say(false, "The proof does not verify", e instanceof Error ? e.message : String(e));
}
