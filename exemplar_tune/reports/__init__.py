"""Reports: what the commands print and write (tables, JSON, Markdown, HTML with charts,
Prometheus text), one module per kind of result. Rendering only; nothing here runs hosts."""
