/**
 * The symbols a pickle names only to run code or reach the system when Python unpickles it.
 * st-convert calls no symbol (a symbol is a name, never an import); one of these refuses the file,
 * so that a checkpoint built to attack whoever loads it in Python is not passed on as a good one.
 *
 * The dangerous list covers what the pickle scanners the Hugging Face Hub runs (picklescan,
 * modelaudit) treat as dangerous: modules whose every function reaches the system (processes,
 * files, sockets, the interpreter) and the builtins that evaluate code or fetch attributes.
 */

/**
 * Modules (and their submodules) whose names all reach the system or run code: processes (`os`
 * and its platform modules `posix`/`nt`, `subprocess`, Python 2's `commands`, `pty`), the
 * interpreter (`sys`, `runpy`, `importlib`, `code`, `pdb`, `bdb`, `timeit`, `pydoc`, `marshal`,
 * `pickle` itself), files (`shutil`, `tempfile`), the network (`socket`, `ssl`, `http`, `urllib`,
 * `requests`, `webbrowser`, …), native code (`ctypes`), package installers (`pip`, `ensurepip`, `venv`).
 */
const DANGEROUS_MODULES: ReadonlySet<string> = new Set([
  "os",
  "posix",
  "nt",
  "subprocess",
  "_posixsubprocess",
  "commands",
  "pty",
  "multiprocessing",
  "signal",
  "sys",
  "runpy",
  "importlib",
  "imp",
  "code",
  "codeop",
  "pdb",
  "bdb",
  "trace",
  "cProfile",
  "profile",
  "timeit",
  "pydoc",
  "marshal",
  "pickle",
  "_pickle",
  "cPickle",
  "dill",
  "joblib",
  "shelve",
  "shutil",
  "tempfile",
  "distutils",
  "socket",
  "ssl",
  "http",
  "httplib",
  "urllib",
  "urllib2",
  "urllib3",
  "requests",
  "aiohttp",
  "asyncio",
  "ftplib",
  "smtplib",
  "telnetlib",
  "webbrowser",
  "ctypes",
  "_ctypes",
  "cffi",
  "pip",
  "ensurepip",
  "venv",
  "numpy.f2py",
  "numpy.testing._private.utils",
  "torch._inductor",
  "torch._dynamo",
  "torch.jit.unsupported_tensor_ops",
  "torch.utils.collect_env",
  "torch.utils.bottleneck",
  "torch.utils._config_module",
  "torch.utils.data.datapipes.utils.decoder",
]);

/**
 * Single symbols that run code, load another pickle or fetch an attribute by name (the first link
 * of a `getattr(__import__("os"), "system")` chain). `__builtin__` is read as `builtins`.
 */
const DANGEROUS_SYMBOLS: ReadonlySet<string> = new Set([
  "builtins.eval",
  "builtins.exec",
  "builtins.execfile",
  "builtins.compile",
  "builtins.open",
  "builtins.file",
  "builtins.input",
  "builtins.raw_input",
  "builtins.breakpoint",
  "builtins.apply",
  "builtins.getattr",
  "builtins.setattr",
  "builtins.delattr",
  "builtins.__import__",
  "builtins.globals",
  "builtins.locals",
  "builtins.vars",
  "builtins.reload",
  "operator.attrgetter",
  "operator.methodcaller",
  "_operator.attrgetter",
  "_operator.methodcaller",
  "torch.load",
  "torch.serialization.load",
  "torch.hub.load",
  "torch.hub.load_state_dict_from_url",
  "torch.fx.experimental.symbolic_shapes.ShapeEnv.evaluate_guards_expression",
  "numpy.load",
  "numpy.ctypeslib.load_library",
  "pandas.read_pickle",
  "pandas.io.pickle.read_pickle",
]);

/**
 * Names that reach a dangerous module through another one (`torch.os.system`,
 * `numpy.core.sys`): refused wherever they appear as a dotted segment of the module or the name.
 */
const REACHED_MODULES: ReadonlySet<string> = new Set([
  "os",
  "posix",
  "nt",
  "subprocess",
  "sys",
  "builtins",
  "__builtin__",
  "importlib",
  "runpy",
  "pty",
  "ctypes",
  "socket",
  "shutil",
  "pickle",
  "_pickle",
  "marshal",
  "webbrowser",
  "__import__",
  "eval",
  "exec",
]);

/** `module.name` as Python 3 resolves it: Python 2's `__builtin__` is `builtins`. */
export function symbolName(module: string, name: string): string {
  return `${module === "__builtin__" ? "builtins" : module}.${name}`;
}

/**
 * Whether a symbol is one a pickle names to run code or reach the system when Python unpickles it.
 * Judged on the name alone: nothing is imported.
 */
export function isDangerousGlobal(module: string, name: string): boolean {
  const full = symbolName(module, name);
  if (DANGEROUS_SYMBOLS.has(full)) return true;
  const moduleParts = (module === "__builtin__" ? "builtins" : module).split(".");
  for (let i = 1; i <= moduleParts.length; i++) if (DANGEROUS_MODULES.has(moduleParts.slice(0, i).join("."))) return true;
  // A dangerous module reached as an attribute of another: any segment after the first of the
  // module, or any segment of the name (`getattr` chains written as dotted names).
  for (const part of [...moduleParts.slice(1), ...name.split(".")]) if (REACHED_MODULES.has(part)) return true;
  return false;
}
