// A small agent loop recording its reasoning in Cairn, then proving it:
// each step is logged as it happens, the session is sealed, exported, and
// the export is verified offline with the bundle verifier (no trust in the
// server needed beyond its published key).
//
// Run against a server:
//   CAIRN_URL=http://127.0.0.1:8714 CAIRN_API_KEY=cairn_... node dist/examples/agent-loop.js

import { CairnClient, verifyBundle, type StepInput, type Verdict } from "../src/index.js";

/** A stand-in for a model and its tools: what a real loop would get from an LLM. */
function think(question: string): Omit<StepInput, "session_id">[] {
  return [
    { step_type: "Observation", content: `User asked: ${question}` },
    { step_type: "Reasoning", content: "Revenue by segment needs the orders table, grouped by segment.", confidence: 0.9 },
    { step_type: "ToolCall", content: "Querying orders", input_data: { sql: "SELECT segment, SUM(revenue) FROM orders GROUP BY 1" } },
    { step_type: "ToolResult", content: "3 rows", output_data: { rows: [["enterprise", 1200], ["smb", 640], ["consumer", 310]] } },
    { step_type: "Decision", content: "Report enterprise as the largest segment.", confidence: 0.85 },
    { step_type: "FinalAnswer", content: "Enterprise 1200, SMB 640, consumer 310." },
  ];
}

export interface AgentLoopResult {
  sessionId: string;
  traceIds: string[];
  seal: Record<string, unknown>;
  bundle: string;
  verdict: Verdict;
}

export async function runAgentLoop(client: CairnClient, sessionId: string, options: { keys?: string[] } = {}): Promise<AgentLoopResult> {
  const traceIds: string[] = [];
  for (const step of think("Q4 revenue by segment?")) {
    const recorded = await client.logStep({ session_id: sessionId, ...step });
    traceIds.push(recorded.trace_id);
  }
  const seal = await client.sealSession(sessionId);
  const bundle = await client.export({ session: sessionId });
  const verdict = await verifyBundle(bundle, { keys: options.keys ?? [] });
  return { sessionId, traceIds, seal, bundle, verdict };
}

async function main(): Promise<void> {
  const baseUrl = process.env["CAIRN_URL"] ?? "http://127.0.0.1:8714";
  const apiKey = process.env["CAIRN_API_KEY"];
  if (!apiKey) throw new Error("set CAIRN_API_KEY to a writer key (cairn admin create-key --role writer)");
  const client = new CairnClient({ baseUrl, apiKey, agentId: process.env["CAIRN_AGENT"] ?? "analyst" });
  const keys = process.env["CAIRN_SERVER_KEY"] ? [process.env["CAIRN_SERVER_KEY"]] : [];
  const result = await runAgentLoop(client, `agent-loop-${Date.now()}`, { keys });
  console.log(`recorded ${result.traceIds.length} steps in ${result.sessionId}, sealed`);
  console.log(result.verdict.verified
    ? `the export verifies offline: ${result.verdict.recordsChecked} records checked${result.verdict.keyPinned ? "" : " (with the bundle's own key: pin CAIRN_SERVER_KEY)"}`
    : `the export does NOT verify: ${JSON.stringify(result.verdict.failure)}`);
  if (!result.verdict.verified) process.exitCode = 1;
}

// Run when executed directly, not when imported by the tests.
if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((e: unknown) => {
    console.error(e);
    process.exitCode = 1;
  });
}
