"""releases"""
