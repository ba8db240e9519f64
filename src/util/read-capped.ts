/** Reads a small response body as text, refusing more than `cap` bytes without buffering them: a peer's answer must not grow memory. */
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
