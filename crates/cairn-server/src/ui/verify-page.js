// The bundle drop page: verifies a dropped export bundle in the browser
// with the published TypeScript verifier (served from /ui/assets/verifier,
// compiled from clients/typescript), streamed, with progress. Nothing is
// sent anywhere.
import { verifyBundleStream } from "./verifier/verify.js";
import { splitVkeys } from "./verifier/note.js";

const input = document.getElementById("bundle");
const drop = document.getElementById("drop");
const keys = document.getElementById("keys");
const witnesses = document.getElementById("witnesses");
const quorum = document.getElementById("quorum");
const result = document.getElementById("result");
const progress = document.getElementById("progress");

function line(parent, text, tag = "p") {
  const node = document.createElement(tag);
  node.textContent = text;
  parent.append(node);
  return node;
}

function render(verdict, name) {
  result.replaceChildren();
  result.className = verdict.verified ? "verdict good" : "verdict bad";
  // A verdict that lacks a proof or cosignatures proves nothing either way:
  // only a contradiction is said to be tampering.
  const reason = verdict.failure && verdict.failure.reason;
  const headline = verdict.verified ? "Verified" : reason === "insufficient-cosignatures" ? "Not cosigned enough"
    : reason === "missing-proof" ? "Not proven" : "Tampered";
  line(result, `${headline}: ${name}`, "h2");
  line(result, `${verdict.recordsChecked} record(s) checked` +
    (verdict.checkpointSize ? `, against the signed checkpoint of size ${verdict.checkpointSize}` : "") +
    (verdict.keyPinned ? ", with the keys you gave." : ", with the key the bundle names (compare it with the operator's)."));
  if (verdict.cosignedBy) {
    const by = verdict.cosignedBy.witnesses;
    line(result, `Cosigned by ${by.length > 0 ? by.join(", ") : "none of the witnesses"}` +
      ` (${verdict.cosignedBy.quorum} needed).`).id = "cosigned";
  }
  if (verdict.failure) {
    const at = verdict.failure.at;
    const where = [
      at.line !== null ? `line ${at.line}` : null,
      at.seq !== null ? `seq ${at.seq}` : null,
      at.session_id !== null ? `session ${at.session_id}` : null,
      at.step_index !== null ? `step ${at.step_index}` : null,
    ].filter(Boolean).join(", ");
    const failing = line(result, `First failing record: ${where || "the bundle as a whole"}`);
    failing.id = "failing";
    line(result, `${verdict.failure.reason}: ${verdict.failure.detail}`);
  }
}

async function check(file) {
  result.className = "verdict";
  result.replaceChildren();
  line(result, `Verifying ${file.name}…`);
  progress.max = Math.max(file.size, 1);
  progress.value = 0;
  progress.hidden = false;
  // Split at Unicode White_Space only (splitVkeys: a key name may hold
  // U+FEFF, at which JavaScript's \s splits).
  const pinned = splitVkeys(keys.value);
  const cosigners = splitVkeys(witnesses.value);
  const needed = quorum.value.trim() === "" ? undefined : Number(quorum.value);
  try {
    const verdict = await verifyBundleStream(file.stream(), {
      keys: pinned,
      witnesses: cosigners,
      ...(needed === undefined ? {} : { witnessQuorum: needed }),
      onProgress: (read) => { progress.value = read; },
    });
    render(verdict, file.name);
  } catch (e) {
    result.className = "verdict bad";
    result.replaceChildren();
    line(result, `Could not verify: ${e instanceof Error ? e.message : String(e)}`);
  }
}

input.addEventListener("change", () => {
  if (input.files && input.files[0]) check(input.files[0]);
});
drop.addEventListener("dragover", (event) => {
  event.preventDefault();
  drop.classList.add("over");
});
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (event) => {
  event.preventDefault();
  drop.classList.remove("over");
  const file = event.dataTransfer && event.dataTransfer.files[0];
  if (file) check(file);
});
