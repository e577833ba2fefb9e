export * from "./verify.js";
