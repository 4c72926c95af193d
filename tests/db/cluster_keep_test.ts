import assert from "node:assert/strict";
import { startCluster } from "../../src/db/cluster.ts";

Deno.test("a kept cluster directory survives a restart (deno task dev's .svc/dev)", async () => {
  const parent = await Deno.makeTempDir({ prefix: "svc-keep-" });
  await Deno.chmod(parent, 0o755); // the postgres OS user (when run as root) must traverse it
  const dir = `${parent}/dev`;
  const first = await startCluster({ dir });
  try {
    assert.equal(first.created, true);
    await first.psql("create table kept (v text); insert into kept values ('still here')");
  } finally {
    await first.stop();
  }
  Deno.statSync(`${dir}/data/PG_VERSION`);
  const second = await startCluster({ dir });
  try {
    assert.equal(second.created, false);
    const out = await second.psql("select v from kept");
    assert.match(out, /still here/);
  } finally {
    second.stopSync();
    await Deno.remove(parent, { recursive: true });
  }
});
