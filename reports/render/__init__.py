"""render: tables, figures, the HTML page and Markdown; imports nothing from api, runs or cli."""
