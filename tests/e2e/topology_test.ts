/**
 * The documented topology (docs/deployment.md): two svc processes (real `main.ts` subprocesses,
 * one of them with two workers) against a PostgreSQL 15 primary and a real streaming replica
 * (`pg_basebackup -R` on loopback).
 *
 * - `NOTIFY svc, 'reload'` makes a new table visible on both processes (every worker) within 2 s,
 *   also after the listen backend was terminated; with the event trigger of docs/deployment.md,
 *   `alter table … add column` alone does;
 * - a function-rooted read of `pg_is_in_recovery()` answers true (it ran on the replica), a write
 *   lands on the primary; `X-Svc-Read: primary` and the configured session claim force the
 *   primary; VOLATILE functions and routes, batches holding a write and `rollback` run on the
 *   primary, STABLE routes and batches of reads on the replica;
 * - an idle primary does not make a caught-up replica count as lagging; a replica whose replay is
 *   paused is skipped once it lags more than `pg.read_max_lag` and used again once it caught up;
 * - with the replica stopped the same read answers false within 5 s (ready stays 200, health
 *   reports the replica down), and true again once it is back;
 * - reads are counted per target in `svc_pg_reads_total`.
 */
import assert from "node:assert/strict";
import { emptyDb, psql, scalar, stopDb, testCluster } from "../helpers/db.ts";
import { freshGet, metricValue, spawnSvc, type SvcProcess } from "../helpers/process.ts";
import { replayAge, startReplica } from "../helpers/replica.ts";
import { cookie, now, token } from "../helpers/server.ts";
import { waitFor } from "../helpers/wait.ts";

const DB = "topo";
const FIXTURE = `
do $$ begin
  if not exists (select from pg_roles where rolname = '~anonymous') then
    create role "~anonymous" nologin; end if;
  if not exists (select from pg_roles where rolname = 'app_user') then
    create role app_user nologin; end if;
end $$;
grant "~anonymous", app_user to current_user;
grant usage on schema public to "~anonymous", app_user;
create table note (id int generated always as identity primary key, body text not null);
grant select, insert on note to "~anonymous", app_user;
create function in_recovery() returns boolean stable language sql
  as $$ select pg_is_in_recovery() $$;
create function in_recovery_volatile() returns boolean volatile language sql
  as $$ select pg_is_in_recovery() $$;
create function recovery_route() returns boolean stable language sql
  as $$ select pg_is_in_recovery() $$;
comment on function recovery_route() is 'route:: path: /recovery';
grant execute on function recovery_route() to "~anonymous";
create function recovery_volatile_route() returns boolean volatile language sql
  as $$ select pg_is_in_recovery() $$;
comment on function recovery_volatile_route() is 'route:: path: /recovery-volatile, method: GET';
grant execute on function recovery_volatile_route() to "~anonymous";
`;

/** The event trigger docs/deployment.md recommends (the same text). */
const EVENT_TRIGGER = `
create function svc_reload() returns event_trigger language plpgsql as $$
begin
  perform pg_notify('svc', 'reload');
end $$;
create event trigger svc_reload_ddl on ddl_command_end execute function svc_reload();
create event trigger svc_reload_drop on sql_drop execute function svc_reload();
`;

const T = { sanitizeResources: false, sanitizeOps: false };

async function post(
  svc: SvcProcess,
  body: unknown,
  headers: HeadersInit = {},
): Promise<{ status: number; body: string }> {
  const r = await fetch(`${svc.url}/svc`, {
    method: "POST",
    headers: { "content-type": "application/json", ...Object.fromEntries(new Headers(headers)) },
    body: JSON.stringify(body),
  });
  return { status: r.status, body: await r.text() };
}

/** Where `{"function": "in_recovery"}` ran: true on the replica, false on the primary. */
async function onReplica(svc: SvcProcess, headers: HeadersInit = {}): Promise<boolean> {
  const r = await post(svc, { function: "in_recovery" }, headers);
  assert.equal(r.status, 200, r.body);
  return JSON.parse(r.body)[0].in_recovery;
}

Deno.test({
  ...T,
  name: "topology: two svc processes, a primary and a streaming replica",
  async fn(t) {
    const uri = await emptyDb(DB, FIXTURE);
    const cluster = await testCluster();
    const replica = await startReplica(cluster);
    const common = [
      `--pg.uri=${uri}`,
      `--pg.read_uri=${replica.uriFor(DB)}`,
      "--pg.read_max_lag=1",
      "--pg.read_primary_claim=read_primary",
      "--pg.query.wellknown_path=/nonexistent",
      "--pg.query.allow_rollback=true",
      "--http.metrics.enable=true",
      "--logging.level=info",
    ];
    const a = await spawnSvc([...common, "--http.workers=2", "--pg.pool_size=4"]);
    const b = await spawnSvc([...common, "--http.workers=1", "--pg.pool_size=2"]);
    const both = [a, b];
    try {
      await Promise.all(both.map((s) => s.waitHealthy()));
      // The replica monitor's first check: reads move to the replica.
      for (const s of both) await waitFor(() => onReplica(s), { what: "reads on the replica" });

      await t.step(
        "NOTIFY svc, 'reload' reaches both processes and every worker in 2 s",
        async () => {
          const gadget = { relation: "gadget" };
          for (const s of both) assert.equal((await post(s, gadget)).status, 404);
          await psql(
            `create table gadget (id int primary key); insert into gadget values (1);
           grant select on gadget to "~anonymous"`,
            DB,
          );
          const t0 = performance.now();
          await psql(`notify svc, 'reload'`, DB);
          // Every request on a fresh connection (the kernel spreads them over a's workers).
          const seen = (s: SvcProcess) =>
            waitFor(async () => {
              for (let i = 0; i < 4; i++) {
                const r = await freshGet(`${s.url}/svc?relation=gadget`);
                if (r.status !== 200) return false;
                assert.deepEqual(JSON.parse(r.body), [{ id: 1 }]);
              }
              return true;
            }, { timeout: 2000, interval: 20, what: "gadget visible" });
          await Promise.all(both.map(seen));
          const ms = performance.now() - t0;
          assert.ok(ms < 2000, `${ms} ms`);
          console.log(`NOTIFY → new table visible on both processes: ${Math.round(ms)} ms`);
          for (const s of both) {
            assert.match(s.output(), /"reason":"notify"/, "reloaded with reason notify");
          }
        },
      );

      await t.step(
        "the event trigger of docs/deployment.md: alter table reaches both",
        async () => {
          await psql(EVENT_TRIGGER, DB);
          const extra = { relation: "note", select: ["id", "extra"] };
          for (const s of both) assert.equal((await post(s, extra)).status, 400);
          const t0 = performance.now();
          await psql("alter table note add column extra text", DB);
          for (const s of both) {
            await waitFor(async () => (await post(s, extra)).status === 200, {
              timeout: 2000,
              what: "the new column visible",
            });
          }
          console.log(`alter table → new column visible: ${Math.round(performance.now() - t0)} ms`);
        },
      );

      await t.step("the listen connection is terminated: LISTEN again, reload again", async () => {
        const pids = await scalar(
          "select string_agg(pid::text, ',') from pg_stat_activity " +
            "where application_name = 'svc-listen' and datname = current_database()",
          DB,
        );
        assert.equal(pids.split(",").length, 2, "one listen connection per process");
        await psql(
          "select pg_terminate_backend(pid) from pg_stat_activity " +
            "where application_name = 'svc-listen'",
          DB,
        );
        for (const s of both) {
          await waitFor(() => /listening on channel .*again/.test(s.output()), {
            what: "LISTEN again",
          });
        }
        await psql(
          `create table widget (id int primary key); grant select on widget to "~anonymous";
           notify svc, 'reload'`,
          DB,
        );
        for (const s of both) {
          await waitFor(async () => (await post(s, { relation: "widget" })).status === 200, {
            what: "widget visible after re-LISTEN",
          });
        }
      });

      await t.step("reads on the replica, writes on the primary", async () => {
        for (const s of both) {
          // On a loaded machine the DDL of the steps before can leave the replica past
          // pg.read_max_lag (1 s) for a moment: reads go to it once it has caught up.
          await waitFor(() => onReplica(s), { what: "reads on the caught-up replica" });
          const get = await freshGet(`${s.url}/svc?function=in_recovery`);
          assert.deepEqual(JSON.parse(get.body), [{ in_recovery: true }], "GET form");
        }
        const w = await post(a, { query: { relation: "note" }, data: [{ body: "from a" }] });
        assert.equal(w.status, 200, w.body);
        assert.deepEqual(JSON.parse(w.body), [{ id: 1, body: "from a", extra: null }]);
        assert.equal(await scalar("select body from note where id = 1", DB), "from a");
        // Replicated: a read of the replica finds it.
        await waitFor(async () => (await post(b, { relation: "note" })).body.includes("from a"), {
          what: "the write replicated",
        });
        const doc = await freshGet(`${a.url}/svc/database.json`);
        assert.equal(doc.status, 200);
      });

      await t.step("forced primary: X-Svc-Read header and the session claim", async () => {
        for (const s of both) {
          assert.equal(await onReplica(s, { "x-svc-read": "primary" }), false);
          assert.equal(await onReplica(s, { "X-Svc-Read": " Primary " }), false);
          await waitFor(() => onReplica(s, { "x-svc-read": "replica" }), {
            what: "an unknown X-Svc-Read value reads the caught-up replica",
          });
        }
        const t0 = now();
        const base = { role: "app_user", iat: t0, exp: t0 + 600, auth_time: t0 };
        const forced = cookie(await token({ ...base, read_primary: true }));
        const until = cookie(await token({ ...base, read_primary: t0 + 300 }));
        const past = cookie(await token({ ...base, read_primary: t0 - 300 }));
        assert.equal(await onReplica(a, forced), false);
        assert.equal(await onReplica(a, until), false);
        assert.equal(await onReplica(a, past), true);
      });

      await t.step(
        "VOLATILE functions and routes, writes in a batch, rollback: primary",
        async () => {
          const vol = await post(a, { function: "in_recovery_volatile" });
          assert.deepEqual(JSON.parse(vol.body), [{ in_recovery_volatile: false }]);
          assert.equal((await freshGet(`${a.url}/recovery`)).body, "true", "STABLE route");
          assert.equal((await freshGet(`${a.url}/recovery-volatile`)).body, "false");
          const reads = await post(a, [{ function: "in_recovery" }, { relation: "gadget" }]);
          assert.deepEqual(JSON.parse(reads.body), [[{ in_recovery: true }], [{ id: 1 }]]);
          const mixed = await post(a, [
            { function: "in_recovery" },
            { query: { relation: "note" }, data: [{ body: "batch" }] },
          ]);
          assert.equal(mixed.status, 200, mixed.body);
          assert.deepEqual(JSON.parse(mixed.body)[0], [{ in_recovery: false }]);
          assert.equal(await scalar("select count(*) from note where body = 'batch'", DB), "1");
          const rolled = await post(a, { query: { function: "in_recovery" }, rollback: true });
          assert.deepEqual(JSON.parse(rolled.body), [{ in_recovery: false }], rolled.body);
          const complex = await post(a, { query: { function: "in_recovery" }, count: true });
          assert.deepEqual(JSON.parse(complex.body).result, [{ in_recovery: true }]);
        },
      );

      await t.step("an idle primary does not make a caught-up replica lag", async () => {
        // No commit for longer than pg.read_max_lag (1 s): the last replayed commit grows old.
        await waitFor(async () => await replayAge(replica, DB) > 2, {
          what: "the last replayed commit older than 2 s",
        });
        for (const s of both) assert.equal(await onReplica(s), true);
      });

      await t.step(
        "a replica lagging past pg.read_max_lag is skipped, then used again",
        async () => {
          await replica.psql("select pg_wal_replay_pause()", DB);
          await psql("insert into note (body) values ('while paused')", DB);
          for (const s of both) {
            await waitFor(async () => !(await onReplica(s)), { what: "reads on the primary" });
          }
          // b has one worker: its health is the monitor that sent the read to the primary.
          const health = JSON.parse((await freshGet(`${b.url}/svc/health`)).body);
          assert.equal(health.status, "ok");
          assert.equal(health.replicas[0].up, false);
          assert.match(health.replicas[0].reason, /lags/);
          await replica.psql("select pg_wal_replay_resume()", DB);
          for (const s of both) await waitFor(() => onReplica(s), { what: "reads on the replica" });
        },
      );

      await t.step(
        "replica stopped: reads on the primary within 5 s; back when it is",
        async () => {
          const t0 = performance.now();
          await replica.ctl(["-m", "fast", "-w", "stop"]);
          // On fresh connections: the kernel spreads them over a's workers, each with its monitor.
          const onPrimaryEverywhere = async (s: SvcProcess) => {
            for (let i = 0; i < 4; i++) {
              const r = await freshGet(`${s.url}/svc?function=in_recovery`);
              if (JSON.parse(r.body)[0].in_recovery !== false) return false;
            }
            return true;
          };
          await Promise.all(both.map((s) =>
            waitFor(() => onPrimaryEverywhere(s), {
              timeout: 5000,
              interval: 50,
              what: "reads on the primary",
            })
          ));
          console.log(
            `pg_ctl stop of the replica → reads on the primary: ${
              Math.round(performance.now() - t0)
            } ms`,
          );
          for (const s of both) {
            const r = await freshGet(`${s.url}/svc/health/ready`);
            assert.equal(r.status, 200, "a replica down does not fail ready");
            const h = JSON.parse(r.body);
            assert.deepEqual([h.status, h.replicas[0].index], ["ok", 0]);
            await waitFor(
              async () => !JSON.parse((await freshGet(`${s.url}/svc/health`)).body).replicas[0].up,
              { what: "health: the replica down" },
            );
            // Every read answers: none fails while the replica is gone.
            for (let i = 0; i < 5; i++) assert.equal(await onReplica(s), false);
          }
          await replica.ctl(["-w", "start"]);
          for (const s of both) {
            await waitFor(() => onReplica(s), { what: "the replica used again" });
          }
          // Each worker checks its replica on its own: health may answer from one a check behind.
          let h: { replicas: { up: boolean; reason?: string; lag_seconds: number }[] } | undefined;
          await waitFor(async () => {
            h = JSON.parse((await freshGet(`${a.url}/svc/health`)).body);
            return h!.replicas[0].up;
          }, { what: "health: the replica up again" });
          assert.deepEqual([h!.replicas[0].up, h!.replicas[0].reason], [true, undefined]);
          assert.ok(h!.replicas[0].lag_seconds <= 1, JSON.stringify(h));
        },
      );

      await t.step("reads counted per target", async () => {
        for (const s of both) {
          const onRep = await metricValue(s.url, /^svc_pg_reads_total\{target="replica0"\}/);
          const onPri = await metricValue(s.url, /^svc_pg_reads_total\{target="primary"\}/);
          assert.ok(onRep > 5 && onPri > 3, `replica0 ${onRep}, primary ${onPri}`);
        }
      });
    } finally {
      const codes = await Promise.all(both.map(async (s) => (await s.stop()).code));
      await replica.remove();
      assert.deepEqual(codes, [0, 0]);
    }
  },
});

Deno.test({ ...T, name: "topology: stop the cluster", fn: stopDb });
