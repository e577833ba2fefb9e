// @cairn/client: the REST client and the offline bundle verifier.
export * from "./client.js";
export * from "./verify.js";
export { VkeyError, splitVkeys } from "./note.js";
export { canonicalJson } from "./jcs.js";
