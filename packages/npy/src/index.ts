/** Work in progress: see the package README. */
export {};
