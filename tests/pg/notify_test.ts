/**
 * LISTEN support of the client: NotificationResponse messages reach `onNotification` with their
 * channel, payload and sender, in order, whether they arrive while the connection is idle or in
 * the middle of a batch's answers; a malformed one is a protocol violation.
 */
import assert from "node:assert/strict";
import { Connection, type Notification } from "../../src/pg/connection.ts";
import { PgConnectionError } from "../../src/pg/errors.ts";
import { emptyDb, stopDb } from "../helpers/db.ts";
import { waitFor } from "../helpers/wait.ts";
import { B, concat, fakeServer, hello, i32, msg } from "./fake_server.ts";

const T = { sanitizeResources: false, sanitizeOps: false };

Deno.test({
  ...T,
  name: "notify: notifications of a LISTENed channel reach onNotification, idle or mid-batch",
  async fn() {
    const uri = await emptyDb("notify");
    const got: Notification[] = [];
    const listener = await Connection.connect(uri, { onNotification: (n) => got.push(n) });
    const sender = await Connection.connect(uri);
    try {
      await listener.simple(`listen "Mixed ""Case"""; listen other`);
      const long = "é".repeat(100) + " ✓";
      await sender.execute([
        { sql: `notify "Mixed ""Case""", 'reload'` },
        { sql: `select pg_notify('other', $1)`, params: [long] },
        { sql: `notify "Mixed ""Case"""` },
        { sql: `notify unheard, 'x'` },
      ]);
      // Delivered while the listener is idle: nothing was sent on it.
      await waitFor(() => got.length >= 3, { what: "three notifications" });
      assert.deepEqual(got.map((n) => [n.channel, n.payload]), [
        ['Mixed "Case"', "reload"],
        ["other", long],
        ['Mixed "Case"', ""],
      ]);
      assert.equal(got[0].processId, sender.processId);
      // The listener's own NOTIFY arrives inside its batch's answers: results are unaffected.
      const [, r] = await listener.execute([
        { sql: "select pg_notify('other', 'mine')" },
        { sql: "select 41 + 1 as n" },
      ]);
      assert.deepEqual(r.rows, [{ n: 42 }]);
      await waitFor(() => got.length === 4, { what: "the own notification" });
      assert.deepEqual([got[3].payload, got[3].processId], ["mine", listener.processId]);
      // Without a callback notifications are dropped (as before): the connection goes on.
      await sender.simple("listen other; select pg_notify('other', 'dropped')");
      const [q] = await sender.execute([{ sql: "select 1 as one" }]);
      assert.deepEqual(q.rows, [{ one: 1 }]);
    } finally {
      await listener.close();
      await sender.close();
    }
  },
});

Deno.test({
  ...T,
  name: "notify: a malformed NotificationResponse is a protocol violation",
  async fn() {
    const bad = msg("A", i32(7), new TextEncoder().encode("no terminator"));
    const s = fakeServer(async (c) => {
      await c.startup();
      await c.send(hello());
      await c.send(concat([B.notification(7, "ok", "fine"), bad]));
      while (await c.next()) { /* until the client leaves */ }
    });
    const got: string[] = [];
    try {
      const c = await Connection.connect(s.uri, { onNotification: (n) => got.push(n.payload) });
      const err = await waitFor(() => c.error, { what: "the connection failed" });
      assert.ok(err instanceof PgConnectionError, String(err));
      assert.match(err.message, /malformed NotificationResponse/);
      await waitFor(() => got.length === 1, { what: "the well-formed notification" });
      assert.deepEqual(got, ["fine"]);
    } finally {
      s.close();
    }
  },
});

Deno.test({ ...T, name: "notify: stop the cluster", fn: stopDb });
