"""Memory libraries people deploy (mem0, graphiti, langmem, cognee), audited as memory systems.

Third-party code runs in the audit's process as a guest (:mod:`.guest`): its
model calls go to the run's gateway (an OpenAI-compatible endpoint on
127.0.0.1 over the managed model layer, :class:`.guest.LibraryEndpoints`),
its telemetry is off, its files live in the run's scratch space, and its
failures are said in one line with its name on them. Each adapter is a
module of its own, imported only when its policy is asked for.
"""
