/**
 * Reads a small response body (a forge's JSON, a bucket's XML) as text, refusing more than `cap`
 * bytes without buffering them: the peer is outside our control, its answers must not grow memory.
 */
export async function readCappedText(
  body: AsyncIterable<Buffer> & { destroy(): unknown },
  cap: number,
  tooLarge: () => Error,
): Promise<string> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const chunk of body) {
    n += chunk.length;
    if (n > cap) {
      body.destroy();
      throw tooLarge();
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}
