/**
 * The direct paths' headers (server/direct/headers.ts `CallHeaders`) behave as web `Headers` do
 * for every operation a handler, an interceptor or connect itself uses: random sequences of
 * operations, with names in mixed case, are applied to both and every observation compared.
 */
import fc from "fast-check";
import test from "ava";
import { CallHeaders } from "../server/direct/headers.ts";

const name = fc.constantFrom("Content-Type", "content-type", "x-a", "X-A", "grpc-status", "authorization", "traceparent", "set-cookie", "b", "a");
const value = fc.stringMatching(/^[a-z0-9 \t=/;,.-]{0,12}$/);
const op = fc.oneof(
  fc.tuple(fc.constant("set" as const), name, value),
  fc.tuple(fc.constant("append" as const), name, value),
  fc.tuple(fc.constant("delete" as const), name, fc.constant("")),
);

function observe(h: Headers): unknown {
  const forEach: [string, string][] = [];
  h.forEach((v, k) => forEach.push([k, v]));
  const names = ["content-type", "X-A", "grpc-status", "authorization", "traceparent", "b", "a"];
  return {
    entries: [...h.entries()],
    iterated: [...h],
    keys: [...h.keys()],
    values: [...h.values()],
    forEach,
    get: names.map((n) => h.get(n)),
    has: names.map((n) => h.has(n)),
  };
}

test("CallHeaders answers as Headers does after any sequence of set, append and delete", (t) => {
  fc.assert(
    fc.property(fc.array(op, { maxLength: 20 }), (ops) => {
      const web = new Headers();
      const ours = new CallHeaders();
      for (const [kind, n, v] of ops) {
        if (kind === "delete") {
          web.delete(n);
          ours.delete(n);
        } else {
          web[kind](n, v);
          ours[kind](n, v);
        }
      }
      // set-cookie is the one name Headers keeps as a list; handlers never see it on a call.
      web.delete("set-cookie");
      ours.delete("set-cookie");
      t.deepEqual(observe(ours), observe(web));
      // Copies each way (connect copies a context's headers into a new Headers, and back).
      t.deepEqual(observe(new CallHeaders(web)), observe(new Headers(web)));
      t.deepEqual(observe(new Headers(ours)), observe(new Headers(web)));
    }),
    { numRuns: 300 },
  );
});

test("CallHeaders from a header record, and a callback that changes the headers as it walks them", (t) => {
  const h = new CallHeaders({ "Content-Type": "application/grpc", "x-b": "2", "x-a": "1" });
  t.deepEqual([...h], [["content-type", "application/grpc"], ["x-a", "1"], ["x-b", "2"]]);
  // connect's copyHeaders deletes every name of the target inside forEach.
  h.forEach((_, key) => h.delete(key));
  t.deepEqual([...h], []);
  t.is(h.get("content-type"), null);
});
