/** An upload's buffers handed on but not yet done with, at most `max`: when full the socket pauses until one is free. */
export class Backlog {
  readonly #max: number;
  #count = 0;
  #waiting = false;
  #drain: (() => void) | null = null;

  constructor(max: number) {
    this.#max = max;
  }

  /** True when `max` buffers are outstanding; the drain listener then runs once one is free. */
  full(): boolean {
    if (this.#count < this.#max) return false;
    this.#waiting = true;
    return true;
  }

  /** True while fewer than `max` buffers are outstanding (no side effect, unlike full()). */
  hasRoom(): boolean {
    return this.#count < this.#max;
  }

  onDrain(listener: () => void): void {
    this.#drain = listener;
  }

  /** Counts a buffer that is free after `parts` completions; returns the callback each one calls. */
  add(parts: number, free: () => void): () => void {
    this.#count++;
    let left = parts;
    return () => {
      if (--left > 0) return;
      free();
      this.#count--;
      if (this.#waiting && this.#count < this.#max) {
        this.#waiting = false;
        this.#drain?.();
      }
    };
  }
}
