import { createHook } from 'node:async_hooks';
import t from 'tap';
import { startThreadpoolNudge } from '../../../src/util/threadpool-nudge.js';

// The nudge's contract: a request goes to libuv's threadpool again and again, for the path given,
// until it is stopped. (What it rescues, a wakeup glibc lost, cannot be made to happen on demand.)
// Its timer is unref'd, so each test keeps the process alive while it waits.

t.test('submits its request for the path, again and again, until stopped', async (t) => {
  const keepAlive = setInterval(() => undefined, 1 << 30);
  t.teardown(() => clearInterval(keepAlive));
  const paths: string[] = [];
  let stop = (): void => undefined;
  await new Promise<void>((third) => {
    stop = startThreadpoolNudge('/var/lib/stowage', (path, done) => {
      paths.push(path);
      done();
      if (paths.length === 3) third();
    });
  });
  stop();
  t.same(paths, ['/var/lib/stowage', '/var/lib/stowage', '/var/lib/stowage'], 'three requests, each for the data directory');
});

t.test('its default request is a file system request, which libuv runs on its threadpool', async (t) => {
  const keepAlive = setInterval(() => undefined, 1 << 30);
  t.teardown(() => clearInterval(keepAlive));
  let stop = (): void => undefined;
  const type = await new Promise<string>((seen) => {
    const hook = createHook({
      init(_id, type) {
        if (type !== 'FSREQCALLBACK') return;
        hook.disable();
        seen(type);
      },
    }).enable();
    stop = startThreadpoolNudge('/nonexistent/stowage-nudge');
  });
  stop();
  t.equal(type, 'FSREQCALLBACK', 'an fs request with a callback (uv_fs_access on the threadpool)');
});
