/** Text-like bytes (an OBJ-ish vertex list): compressible, but every line differs; `seed` varies them. */
export function textLike(size: number, seed = 0): Buffer {
  const out = Buffer.alloc(size);
  let at = 0;
  for (let i = 0; at < size; i++) at += out.write(`v ${seed} ${i * 0.5} ${i % 977} // vertex ${i}\n`, at);
  return out;
}
