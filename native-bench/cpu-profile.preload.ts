/**
 * Preload (`NODE_OPTIONS=--import …/cpu-profile.preload.js`) that CPU-profiles the process it loads
 * into and writes a .cpuprofile when that process exits: `--cpu-prof` itself is refused in NODE_OPTIONS,
 * and the server is started by the test helper, whose command line we do not change.
 * Target file: $STOWAGE_CPU_PROFILE.
 */
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';

const target = process.env.STOWAGE_CPU_PROFILE;
if (target) {
  const session = new Session();
  session.connect();
  session.post('Profiler.enable');
  session.post('Profiler.setSamplingInterval', { interval: 500 });
  session.post('Profiler.start');
  process.on('exit', () => {
    // The in-process session answers synchronously, so this completes inside the 'exit' handler.
    session.post('Profiler.stop', (err, res) => {
      if (!err) writeFileSync(target, JSON.stringify(res.profile));
    });
  });
}
