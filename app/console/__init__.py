"""The web console's page (index.html, console.js, console.css), served by `app/api/endpoints/console.py`."""
