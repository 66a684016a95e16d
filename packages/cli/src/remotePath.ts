/** Whether an input names a remote file, without loading the remote-input code (remoteInput.ts). */

/** Whether `input` names a remote file: it starts with `http://`, `https://` or `hf://`. */
export function isRemoteInput(input: string): boolean {
  return /^(?:https?|hf):\/\//i.test(input);
}
