"""The web console's page (index.html, console.css, and console.js with the ES modules it imports), served as
written by `app/api/endpoints/console.py`. Package data, not Python: nothing imports it."""
